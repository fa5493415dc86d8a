"""`workbench estimate`: the memory planner on the command line.

    workbench estimate PROFILE.toml                 # everything from the profile
    workbench estimate --model DIR --tuner qlora    # any folder holding config.json
    workbench estimate PROFILE.toml --batch-size 4  # options override the profile

The main CLI calls `register(app)` to add the command. Bad input (no config.json, an
option value out of range, an inconsistent combination) prints one clear line to stderr
and exits with status 2, as click does for its own usage errors.
"""

from __future__ import annotations

import json
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from backend.core.units import GIB
from backend.estimate import (
    ConfigError,
    EstimateRequest,
    ModelShape,
    detect_gpu_memory_bytes,
    detect_host_memory_bytes,
    estimate,
    render_table,
)
from backend.estimate.calibration import Calibration, calibrate, device_kind


class Tuner(str, Enum):
    full = "full"
    lora = "lora"
    qlora = "qlora"


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class Distribution(str, Enum):
    single = "single"
    ddp = "ddp"
    fsdp = "fsdp"
    deepspeed = "deepspeed"


class FsdpStrategy(str, Enum):
    FULL_SHARD = "FULL_SHARD"
    SHARD_GRAD_OP = "SHARD_GRAD_OP"
    NO_SHARD = "NO_SHARD"
    HYBRID_SHARD = "HYBRID_SHARD"


def register(app: typer.Typer) -> None:
    """Add the `estimate` command to the workbench's Typer app."""
    app.command("estimate", help="Forecast GPU and host memory of a fine-tune from config.json alone.")(
        estimate_command)


def estimate_command(
    profile: Annotated[Path | None, typer.Argument(help="Launch profile (TOML); options below override it.",
                                                   show_default=False)] = None,
    model: Annotated[Path | None, typer.Option("--model", help="Folder holding config.json (no weights needed).",
                                               show_default=False)] = None,
    tuner: Annotated[Tuner | None, typer.Option(help="Tuner (default lora).",
                                                show_default=False)] = None,
    lora_rank: Annotated[int | None, typer.Option(min=1, help="LoRA rank r (default 8)",
                                                  show_default=False)] = None,
    target_modules: Annotated[str | None, typer.Option(
        help="Comma-separated LoRA targets, e.g. q_proj,v_proj (default all-linear)", show_default=False)] = None,
    precision: Annotated[Precision | None, typer.Option(help="Training precision (default bf16).",
                                                        show_default=False)] = None,
    distribution: Annotated[Distribution | None, typer.Option(
        help="How processes share the work (default single).", show_default=False)] = None,
    fsdp_strategy: Annotated[FsdpStrategy | None, typer.Option(
        case_sensitive=False, help="FSDP sharding strategy (default FULL_SHARD)", show_default=False)] = None,
    zero_stage: Annotated[int | None, typer.Option(min=0, max=3, help="DeepSpeed ZeRO stage (default 2)",
                                                   show_default=False)] = None,
    offload: Annotated[bool | None, typer.Option("--offload/--no-offload",
                                                 help="Offload optimizer (and params) to host RAM.",
                                                 show_default=False)] = None,
    num_gpus: Annotated[int | None, typer.Option(min=1, help="GPUs per node (default 1)",
                                                 show_default=False)] = None,
    num_nodes: Annotated[int | None, typer.Option(min=1, help="Nodes (default 1)", show_default=False)] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Per-device batch size (default 1)",
                                                   show_default=False)] = None,
    max_length: Annotated[int | None, typer.Option(min=1, help="Sequence length in tokens (default 2048)",
                                                   show_default=False)] = None,
    gradient_checkpointing: Annotated[bool | None, typer.Option(
        "--gradient-checkpointing/--no-gradient-checkpointing", help="Recompute activations in backward (default on).", show_default=False)] = None,
    gpu_memory: Annotated[float | None, typer.Option(
        "--gpu-memory", min=0.001, help="GiB per GPU; default: detected through NVML.", show_default=False)] = None,
    host_memory: Annotated[float | None, typer.Option(
        "--host-memory", min=0.001, help="GiB of RAM per node; default: this machine's.", show_default=False)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
    formula: Annotated[bool, typer.Option(
        "--formula", help="Count with the pure-Python formula instead of asking transformers (no child "
        "process; exact for Llama/Qwen/Mistral, estimated for the rest).")] = False,
    no_calibration: Annotated[bool, typer.Option(
        "--no-calibration", help="The textbook host terms, not what this machine's finished runs measured "
        "(WORKBENCH_CALIBRATION=off does the same for every forecast).")] = False,
) -> None:
    """Forecast per-GPU and host memory; say whether it fits and what would."""
    overrides = {
        "tuner": tuner, "lora_rank": lora_rank, "precision": precision, "distribution": distribution,
        "fsdp_strategy": fsdp_strategy, "zero_stage": zero_stage, "offload": offload, "num_gpus": num_gpus,
        "num_nodes": num_nodes, "batch_size": batch_size, "max_length": max_length,
        "gradient_checkpointing": gradient_checkpointing,
        "target_modules": tuple(t.strip() for t in target_modules.split(",") if t.strip())
        if target_modules is not None else None,
    }
    for name, given in (("--gpu-memory", gpu_memory), ("--host-memory", host_memory)):
        if given is not None and not given < float("inf"):  # click's min lets inf and nan through
            _fail(f"{name} {given}: give a finite number of GiB")
    calibration = Calibration(off=True) if no_calibration else None
    shape, request = _inputs(_shipped_or_path(profile), model, formula=formula, calibration=calibration)
    try:
        request = replace(request, **{k: _plain(v) for k, v in overrides.items() if v is not None})
    except ValueError as err:
        _fail(str(err))
    gpu_bytes = round(gpu_memory * GIB) if gpu_memory is not None else detect_gpu_memory_bytes()
    host_bytes = round(host_memory * GIB) if host_memory is not None else detect_host_memory_bytes()
    result = estimate(shape, replace(request, gpu_memory_bytes=gpu_bytes, host_memory_bytes=host_bytes))
    longest = _longest_batch(_shipped_or_path(profile), shape, ask=not formula)
    if json_output:
        typer.echo(json.dumps({**result.to_json(), **({"longest_batch": longest.to_json()} if longest else {})},
                              indent=2))
    else:
        console = Console()
        console.print(render_table(result, describe_terms=console.width >= 120))
        console.print(Text("\n".join(result.request.calibration)))  # where the host terms came from
        if longest is not None:
            typer.echo(longest.line())


def _longest_batch(profile: Path | None, shape: ModelShape, *, ask: bool) -> Any:
    """When the run's largest micro-batch arrives and its peak (#37), asked of swift in a child unless cached
    (`--formula`: the cache only); None without a profile or when it cannot be known."""
    if profile is None:
        return None
    from backend.hardware.machine import detect_hardware
    from backend.launch.longest_batch import predict
    from backend.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
    except ProfileError:
        return None
    return predict(loaded, detect_hardware(), profile.parent, ask=ask, shape=shape,
                   progress=lambda line: typer.echo(f"workbench estimate: {line}", err=True))


def _inputs(profile: Path | None, model: Path | None, *, formula: bool = False,
            calibration: Calibration | None = None) -> tuple[ModelShape, EstimateRequest]:
    """Shape and base request, from the profile when one is given, else from defaults.

    The shape comes from transformers itself (one child process the first time, announced on
    stderr; cached afterwards), or from the formula with `--formula`."""
    from backend.models.shape_exact import cached_shape, exact_shape

    def announce(line: str) -> None:
        typer.echo(f"workbench estimate: {line}", err=True)

    def shape_of(folder: Path, targets: tuple[str, ...] = ("all-linear",)) -> ModelShape:
        return cached_shape(folder, targets) if formula else exact_shape(folder, targets, progress=announce)

    try:
        if profile is None:
            if model is None:
                _fail("nothing to estimate: pass a PROFILE or --model DIR (a folder holding config.json)")
            return shape_of(model), calibrate(EstimateRequest(), device_kind(False), None, calibration)
        from backend.estimate.from_profile import request_from_profile, shape_from_profile
        from backend.hardware.machine import detect_hardware, trains_on_cpu
        from backend.profile import ProfileError, load_profile

        try:
            loaded = load_profile(profile)
        except ProfileError as err:
            _fail(f"profile {profile}: {err}")
        targets = tuple(loaded.tuner.target_modules) or ("all-linear",)
        shape = shape_of(model, targets) if model else shape_from_profile(
            loaded, profile.parent, exact=not formula, progress=announce)
        return shape, request_from_profile(
            loaded, shape, on_cpu=trains_on_cpu(loaded.distribution.device, detect_hardware()), calibration=calibration)
    except (ConfigError, ValueError) as err:
        _fail(str(err))
    except RecursionError:  # a config.json nested past the interpreter's limit
        _fail("config.json is nested too deep to be a model config")


def _shipped_or_path(profile: Path | None) -> Path | None:
    """A path, or the name of a shipped profile (`quickstart`), as every other command reads it."""
    from backend.cli.common import resolve_profile_path

    return None if profile is None else resolve_profile_path(profile)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _fail(message: str) -> NoReturn:
    typer.echo(f"workbench estimate: {message}", err=True)
    raise typer.Exit(code=2)
