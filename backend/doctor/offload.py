"""What a run keeps in host memory instead of the GPU's (FSDP's cpu_offload, DeepSpeed's offload_optimizer /
offload_param), and the profile change that turns it off: the evidence of the doctor's "CPU offload over a slow
link" verdict besides the measured optimizer step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.profile import LaunchProfile

OFFLOAD_PRESETS = {"zero2_offload": "zero2", "zero3_offload": "zero3"}  # swift's presets and their GPU-only twins


@dataclass(frozen=True)
class Offload:
    engine: str  # "FSDP" or "DeepSpeed"
    what: str  # what lives in host memory
    change: dict[str, Any] = field(default_factory=dict)  # the profile change that turns it off; {} when no key can


def offload_of(profile: LaunchProfile | None, args: dict[str, Any]) -> Offload | None:
    """The run's offload: DeepSpeed's from swift's own resolved config (args.json's `deepspeed`: presets and files
    read), else from the profile; FSDP's from the profile ([distribution.fsdp] cpu_offload) or swift's `fsdp`
    argument. None when nothing is offloaded."""
    deepspeed = args.get("deepspeed")
    if isinstance(deepspeed, dict):
        found = _deepspeed_offload(deepspeed.get("zero_optimization") or {}, profile)
        if found is not None:
            return found
    if profile is None:
        return _swift_fsdp(args)
    distribution = profile.distribution
    if distribution.strategy == "fsdp" and distribution.fsdp.cpu_offload:
        return Offload("FSDP", "parameters and gradients", {"distribution.fsdp.cpu_offload": False})
    if distribution.strategy == "deepspeed" and not isinstance(deepspeed, dict):
        ds = distribution.deepspeed
        if ds.config is None and (ds.offload_optimizer or ds.offload_param):
            zero = {"offload_optimizer": {"device": "cpu"}} if ds.offload_optimizer else {}
            if ds.offload_param and ds.stage == 3:
                zero["offload_param"] = {"device": "cpu"}
            return _deepspeed_offload(zero, profile)
        if ds.config in OFFLOAD_PRESETS:
            return Offload(
                "DeepSpeed",
                "the optimizer state" + (" and parameters" if ds.config == "zero3_offload" else ""),
                {"distribution.deepspeed.config": OFFLOAD_PRESETS[ds.config]},
            )
    return _swift_fsdp(args)


def _deepspeed_offload(zero: dict[str, Any], profile: LaunchProfile | None) -> Offload | None:
    parts = [
        name
        for key, name in (("offload_optimizer", "the optimizer state"), ("offload_param", "parameters"))
        if _on_host(zero.get(key))
    ]
    if not parts:
        return None
    return Offload("DeepSpeed", " and ".join(parts), _deepspeed_change(zero, profile))


def _on_host(setting: Any) -> bool:
    return isinstance(setting, dict) and str(setting.get("device", "none")).lower() in ("cpu", "nvme")


def _deepspeed_change(zero: dict[str, Any], profile: LaunchProfile | None) -> dict[str, Any]:
    """Off through the key the profile set it with; {} for a DeepSpeed JSON file of the user's (edited by hand)."""
    if profile is None or profile.distribution.strategy != "deepspeed":
        return {}
    ds = profile.distribution.deepspeed
    if ds.config in OFFLOAD_PRESETS:
        return {"distribution.deepspeed.config": OFFLOAD_PRESETS[ds.config]}
    if ds.config is not None:
        return {}
    return {
        f"distribution.deepspeed.{key}": False
        for key in ("offload_optimizer", "offload_param")
        if getattr(ds, key) and _on_host(zero.get(key))
    }


def _swift_fsdp(args: dict[str, Any]) -> Offload | None:
    """swift's own `--fsdp 'full_shard auto_wrap offload'` (passed as an extra argument)."""
    fsdp = args.get("fsdp")
    if isinstance(fsdp, str) and "offload" in fsdp.split():
        return Offload("FSDP", "parameters and gradients")
    return None
