"""What the launch screen says about the machine and the model, as plain functions (no widgets):
the hardware lines, swift's model_type/template warnings, where a model's files are."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from backend.core.units import gib
from backend.data.swift_view import summary_line as data_summary_line
from backend.hardware.machine import HardwareInfo
from backend.launch.longest_batch import known as known_longest_batch
from backend.launch.validate import Problem
from backend.models.registry import SwiftInference, describe_source
from backend.profile import LaunchProfile

NARROW_BELOW = 120  # columns: below this the details pane goes under the form


def hardware_line(hardware: HardwareInfo | None) -> str:
    if hardware is None:
        return "detecting hardware…"
    if not hardware.has_cuda:
        return f"no GPU · {hardware.cpu_count} CPUs · {gib(hardware.ram_total_bytes, 0)} GiB"
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


def model_dir_of(source: str, base_dir: Path) -> Path | None:
    info = describe_source(source, base_dir)
    return info.path if info.path and info.path.is_dir() else None


def field_of(problem_field: str, editors: Mapping[str, object]) -> str | None:
    """The editor showing a problem's field (extra_swift_args.use_cpu -> extra_swift_args)."""
    path = problem_field
    while path:
        if path in editors:
            return path
        path = path.rpartition(".")[0]
    return None


def launch_summary(p: LaunchProfile, problems: Iterable[Problem], base_dir: Path | None = None) -> str:
    """What the launch confirmation says about the run."""
    epochs = p.training.num_train_epochs
    steps = (f"{p.training.max_steps} steps" if p.training.max_steps and p.training.max_steps > 0
             else f"{epochs:g} epochs" if epochs is not None else "ms-swift's default number of epochs")
    warnings = [x for x in problems if x.severity == "warning"]
    lines = [
        f"profile   {p.name}",
        f"model     {p.model.source}",
        f"data      {' '.join(p.data.train)}",
        f"tuner     {p.tuner.type} · precision {p.precision.mode} · {p.distribution.strategy} "
        f"× {p.distribution.world_size}",
        f"length    {steps}",
        *([f"data      {line}"] if (line := data_summary_line(p.data.train)) else []),
        *([f"memory    {found.line()}"] if (found := known_longest_batch(p, base_dir)) else []),
        "The run starts detached: it keeps going if this terminal or SSH session closes.",
    ]
    if warnings:
        lines.append(f"{len(warnings)} warning(s): {'; '.join(w.field for w in warnings)}")
    return "\n".join(lines)
