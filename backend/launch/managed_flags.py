"""Which swift flags the workbench decides itself (`managed_flags`): derived from the command builder, never
listed by hand. The builder is run on probe profiles in which every key is set, on a CPU machine and on a
GPU machine, for each tuner and distribution strategy; a flag it can emit is one `extra_swift_args` must not
pass a second time (validation, `workbench import` and `workbench schema --swift` ask this).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.hardware.machine import HardwareInfo
from backend.launch.command import swift_flags, swift_tuner_type
from backend.launch.swift_schema import SwiftSchema
from backend.profile import LaunchProfile


def managed_flags() -> dict[str, str]:
    """swift flag -> the profile key that decides it (or why the workbench passes it).

    Derived from what the builder emits for probe profiles in which every key is set, on a CPU
    machine and on a GPU machine, for each tuner and distribution strategy: a flag the builder can
    emit is a flag `extra_swift_args` must not pass a second time.
    """
    global _MANAGED
    if _MANAGED is None:
        managed: dict[str, str] = {}
        for profile, hardware in _probe_profiles():
            flags = swift_flags(profile, hardware, model="/m", output_dir=Path("/o"), base_dir=None,
                                ds_path=Path("/d.json") if profile.distribution.strategy == "deepspeed" else None)
            for flag in flags:
                managed.setdefault(flag.name, flag.key or f"the workbench: {flag.reason}")
        _MANAGED = managed
    return dict(_MANAGED)


_MANAGED: dict[str, str] | None = None


def _probe_profiles() -> list[tuple[LaunchProfile, HardwareInfo]]:
    from backend.hardware.machine import GpuInfo

    gpu = HardwareInfo(gpus=(GpuInfo(index=0, name="probe", memory_total_bytes=1 << 36, memory_used_bytes=0,
                                     utilization_percent=0, compute_capability=(8, 0)),),
                       cuda_driver_version=(12, 4), cpu_count=2, ram_total_bytes=1 << 34)
    cpu = HardwareInfo(nvml_error="probe", cpu_count=2, ram_total_bytes=1 << 34)
    base = _every_key_set(LaunchProfile)
    probes = []
    for tuner in ("full", "lora", "qlora"):
        for strategy, hardware in (("single", cpu), ("deepspeed", gpu), ("fsdp", gpu)):
            data = json.loads(json.dumps(base))
            data["tuner"]["type"], data["distribution"]["strategy"] = tuner, strategy
            data["distribution"]["device"] = "cpu" if hardware is cpu else "cuda"
            data["precision"]["bf16"] = data["precision"]["fp16"] = None
            data["data"]["val"] = ["/v.jsonl"]
            data["model"]["torch_dtype"] = "bfloat16"
            probes.append((LaunchProfile.model_validate(data), hardware))
            data["precision"]["bf16"], data["precision"]["fp16"] = True, False
            probes.append((LaunchProfile.model_validate(data), hardware))
    return probes


def _every_key_set(model: Any) -> dict[str, Any]:
    """A valid dict giving every key of `model` a value (None-defaults get a sample value)."""
    from pydantic import BaseModel

    data: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            data[name] = _every_key_set(annotation)
            continue
        default = info.default_factory() if info.default_factory else info.default
        if default is None:
            default = next(v for v in _samples(annotation) if _valid(model, name, v))
        data[name] = default
    return data


def _samples(annotation: Any) -> list[Any]:
    from typing import Literal, get_args, get_origin

    args = get_args(annotation)
    literals = [a for arg in args if get_origin(arg) is Literal for a in get_args(arg)]
    if get_origin(annotation) is Literal:
        literals = list(args)
    return [*literals, 8, 0.5, True, "x", ["x"]]


def _valid(model: Any, name: str, value: Any) -> bool:
    from pydantic import ValidationError

    try:
        model.__pydantic_validator__.validate_assignment(model.model_construct(), name, value)
        return True
    except (ValidationError, TypeError, ValueError):
        return False


def unset_key_defaults(profile: LaunchProfile, schema: SwiftSchema) -> dict[str, str]:
    """profile key -> what swift uses instead, for each key the profile leaves unset that the
    builder would otherwise pass as a flag: "1e-05 (swift's default for full)"; keys whose value
    swift decides later from the model or the data are left out."""
    shown: dict[str, str] = {}
    tuner_type = swift_tuner_type(profile)
    for flag, key in managed_flags().items():
        section, _, name = key.rpartition(".")
        owner: Any = profile
        for part in section.split(".") if section else []:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name) or getattr(owner, name) is not None:
            continue
        known, value = schema.default_for(flag, tuner_type)
        if known:
            per_tuner = f" for {tuner_type}" if flag in schema.tuner_defaults else ""
            shown[key] = f"{value} (swift's default{per_tuner})"
    return shown
