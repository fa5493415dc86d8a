"""What the launch screen shows and decides, as plain functions (no widgets): which settings go in
which tab, which fields matter for the current settings, the hardware lines, and small checks."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from backend.hardware import HardwareInfo
from backend.models import SwiftInference, describe_source
from backend.paths import SHIPPED_PROFILES_DIR, is_builtin
from backend.profile import LaunchProfile, ProfileError, load_profile
from backend.validate import Problem
from tui.command_text import display_path
from tui.widgets.settings_form import section_paths

NARROW_BELOW = 120  # columns: below this the details pane goes under the form
BUILTIN_TYPES = ("qwen2", "qwen")  # what swift must be told for the built-in models

# tab id, title, sections shown ("" = the profile's own scalar fields)
TABS: list[tuple[str, str, list[str]]] = [
    ("model", "Model", ["model"]),
    ("data", "Data", ["data"]),
    ("tuner", "Tuner", ["tuner"]),
    ("precision", "Precision", ["precision"]),
    ("distribution", "Distribution", ["distribution"]),
    ("training", "Training", ["training"]),
    ("output", "Output", ["", "output", "debug"]),
]


def visible_rules(p: LaunchProfile) -> dict[str, bool]:
    """Fields that only matter for some settings (prefix -> shown)."""
    t, d = p.tuner, p.distribution
    return {
        "tuner.lora_": t.type != "full",
        "tuner.target_modules": t.type != "full",
        "tuner.quant_": t.type == "qlora",
        "tuner.bnb_4bit_": t.type == "qlora" and t.quant_bits == 4,
        "precision.loss_scale_": p.precision.fp16,
        "distribution.fsdp": d.strategy == "fsdp",
        "distribution.deepspeed": d.strategy == "deepspeed",
        "distribution.deepspeed.offload_param": d.strategy == "deepspeed" and d.deepspeed.stage == 3,
        "distribution.fsdp.min_num_params": d.strategy == "fsdp" and d.fsdp.auto_wrap_policy == "SIZE_BASED_WRAP",
        "distribution.fsdp.transformer_layer_cls_to_wrap":
            d.strategy == "fsdp" and d.fsdp.auto_wrap_policy == "TRANSFORMER_BASED_WRAP",
        "distribution.main_process_": d.num_machines > 1,
        "distribution.machine_rank": d.num_machines > 1,
        "distribution.rdzv_backend": d.num_machines > 1,
        "training.gradient_checkpointing_use_reentrant": p.training.gradient_checkpointing,
    }


def is_visible(path: str, profile: LaunchProfile, rules: dict[str, bool] | None = None) -> bool:
    """The most specific matching rule decides."""
    matching = [(prefix, shown) for prefix, shown in (rules or visible_rules(profile)).items()
                if path.startswith(prefix)]
    return max(matching, key=lambda r: len(r[0]))[1] if matching else True


def tab_paths(sections: list[str]) -> Iterator[str | tuple[str, str]]:
    for section in sections:
        if section:
            yield from section_paths(section)
        else:  # the profile's own scalar fields, not its sections
            yield from (p for p in section_paths("") if isinstance(p, str) and "." not in p)


def hardware_line(hardware: HardwareInfo | None) -> str:
    if hardware is None:
        return "detecting hardware…"
    if not hardware.has_cuda:
        return f"no GPU · {hardware.cpu_count} CPUs · {hardware.ram_total_bytes / 2**30:.0f} GiB"
    names = sorted({g.name.removeprefix("NVIDIA ") for g in hardware.gpus})
    return f"{len(hardware.gpus)}× {', '.join(names)}"


def precision_support(hardware: HardwareInfo | None) -> str:
    if hardware is None:
        return "Detecting this machine's precision support…"
    if not hardware.has_cuda:
        why = f" ({hardware.nvml_error})" if hardware.nvml_error else ""
        return (f"This machine: no NVIDIA GPU{why}.\nOn CPU: fp32 ✓ · bf16 ✓ (CPU autocast; launch adds "
                "--use_cpu true) · fp16 ✓ (workbench CPU loss scaler; slow) · TF32 ✗ (needs an Ampere+ GPU)")
    lines = [f"This machine: CUDA driver {'.'.join(map(str, hardware.cuda_driver_version or ())) or '?'}, "
             f"bf16 ready: {'yes' if hardware.bf16_ready else 'no'}"]
    for gpu in hardware.gpus:
        cc = ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else "?"
        bf16 = {True: "✓", False: "✗", None: "?"}[gpu.supports_bf16]
        lines.append(f"GPU {gpu.index} {gpu.name} (sm {cc}): fp32 ✓ · fp16 ✓ · bf16 {bf16} · TF32 {bf16}")
    return "\n".join(lines)


def distribution_support(hardware: HardwareInfo | None, profile: LaunchProfile) -> str:
    d = profile.distribution
    world = f"World size: {d.nproc_per_node} process(es) × {d.num_machines} machine(s) = {d.world_size}."
    if hardware is None:
        return world
    if not hardware.has_cuda:
        return (f"{world}\nNo GPU here: several processes run on CPU with gloo; FSDP degrades to DDP, "
                "DeepSpeed needs GPUs.")
    gpus = ", ".join(f"{g.index}: {g.name}" for g in hardware.gpus)
    return f"{world}\nGPUs: {gpus}"


def swift_type_problems(inference: SwiftInference) -> list[Problem]:
    """Warnings for what swift will not be able to infer (the launch would stop at swift's start)."""
    if inference.how == "unknown" and not inference.model_type_choices and inference.model_type is None \
            and any("registry has not been read" in w for w in inference.warnings):
        return []  # not known yet: the registry is being read
    problems = []
    if inference.model_type is None:
        choices = ", ".join(inference.model_type_choices[:8]) or "the type ms-swift lists for this model"
        problems.append(Problem("model.model_type", "warning", "ms-swift cannot infer model_type for this model.",
                                f"Set model_type, e.g. one of: {choices}."))
    elif inference.template is None:
        choices = ", ".join(inference.template_choices[:8]) or "the template of this model's family"
        problems.append(Problem("model.template", "warning", f"ms-swift cannot infer the template of "
                                f"{inference.model_type}.", f"Set template, e.g. one of: {choices}."))
    return problems


def profile_label(path: Path) -> str:
    """Shipped profiles by their place in the package, others relative to cwd or home."""
    shipped = SHIPPED_PROFILES_DIR.resolve()
    if path.resolve().is_relative_to(shipped):
        return f"{shipped.name}/{path.resolve().relative_to(shipped)}"
    return display_path(path)


def rebase_ref(ref: str, old_base: Path, new_base: Path) -> str:
    """A relative local path that named a file next to the old profile, made to name it from the new one."""
    if is_builtin(ref) or Path(ref).is_absolute() or ref.startswith("~"):
        return ref
    path_part, sep, sample = ref.partition("#")
    if not (old_base / path_part).exists() or old_base.resolve() == new_base.resolve():
        return ref
    relative = os.path.relpath((old_base / path_part).resolve(), new_base.resolve())
    relative = relative if relative.startswith("..") else "./" + relative
    return relative + sep + sample


def model_dir_of(source: str, base_dir: Path) -> Path | None:
    info = describe_source(source, base_dir)
    return info.path if info.path and info.path.is_dir() else None


def first_message(err: ValidationError) -> str:
    item = err.errors()[0]
    message = item["msg"]
    return message.removeprefix("Value error, ")


def field_of(problem_field: str, editors: dict[str, object]) -> str | None:
    """The editor showing a problem's field (extra_swift_args.use_cpu -> extra_swift_args)."""
    path = problem_field
    while path:
        if path in editors:
            return path
        path = path.rpartition(".")[0]
    return None


def looks_like_profile(path: Path) -> bool:
    """TOML with a profile's sections (pyproject.toml and friends are not offered)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True  # a broken profile is still offered: opening it explains what is wrong
    return bool({"model", "data", "tuner", "training"} & set(data))


def check_profile(path: Path) -> str | None:
    try:
        load_profile(path)
    except ProfileError as err:
        return "; ".join(str(p) for p in err.problems[:3])
    return None
