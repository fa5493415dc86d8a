"""Bridge from a launch profile (backend/profile.py) to the planner's inputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from backend.estimate.calibration import Calibration, calibrate, device_kind, swift_workers
from backend.estimate.request import EstimateRequest
from backend.hardware.machine import trains_on_cpu
from backend.models.shape import ModelShape
from backend.models.shape_formula import ConfigError, shape_from_config

if TYPE_CHECKING:
    from backend.models.resolved import ResolvedProfile
    from backend.profile import LaunchProfile

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_OPTIMIZERS = {"adamw_torch": "adamw_foreach", "adamw_torch_fused": "adamw", "adamw": "adamw",
               "paged_adamw_32bit": "paged_adamw_32bit"}


ASSUMED_ROW_TOKENS = 2048  # max_length unset and the data's lengths not known yet


def request_from_profile(profile: LaunchProfile, shape: ModelShape, gpu_memory_bytes: int | None = None, *,
                         base_dir: Path | None = None, longest_row: int | None = None,
                         on_cpu: bool | None = None, calibration: Calibration | None = None,
                         resolved: ResolvedProfile | None = None) -> EstimateRequest:
    """The EstimateRequest a profile describes (its field names follow ms-swift / accelerate).

    `longest_row`: the data's longest row in tokens when the caller knows it; otherwise swift's
    cached report on the profile's data is looked up (never asked: no child starts here). `on_cpu`: whether
    the run trains on the CPU (backend.hardware.machine.trains_on_cpu for the machine it starts on: then in
    fp32 when the profile leaves precision unset, as the launch does); None: only an explicit 'cpu' counts.
    `calibration`: the host terms this machine's runs measured (None: machine_calibration, the one question)."""
    tuner, dist, train = profile.tuner, profile.distribution, profile.training
    extra = profile.extra_swift_args
    notes: list[str] = []
    if train.max_length is None and longest_row is None:
        longest_row = known_longest_row(profile, base_dir, resolved)
    torch_dtype = _DTYPES.get(profile.model.torch_dtype) or shape.torch_dtype
    if on_cpu is None:
        on_cpu = trains_on_cpu(dist.device, None)
    if on_cpu:
        notes.append("the run trains on the CPU: the GPU forecast does not apply, the host figures do")
    offload, offload_param = _offload(profile)
    request = EstimateRequest(
        tuner=tuner.type,
        lora_rank=tuner.lora_rank,
        lora_alpha=tuner.lora_alpha,
        lora_dropout=tuner.lora_dropout,
        target_modules=tuple(tuner.target_modules),
        quant_bits=tuner.quant_bits,
        double_quant=tuner.bnb_4bit_use_double_quant,
        bnb_4bit_quant_storage=_DTYPES.get(tuner.bnb_4bit_quant_storage or ""),
        precision=_precision(profile, torch_dtype, notes, on_cpu),
        torch_dtype=torch_dtype,
        distribution=dist.strategy,
        fsdp_strategy=dist.fsdp.sharding_strategy,
        fsdp_version=dist.fsdp.version,
        zero_stage=dist.deepspeed.stage,
        offload=offload,
        offload_param=offload_param,
        num_gpus=dist.nproc_per_node if dist.strategy != "single" else 1,
        num_nodes=dist.num_machines if dist.strategy != "single" else 1,
        batch_size=train.per_device_train_batch_size,
        max_length=_max_length(profile, shape, longest_row, notes),
        eval_batch_size=train.per_device_eval_batch_size,
        fsdp_state_dict_type=dist.fsdp.state_dict_type,
        gradient_checkpointing=train.gradient_checkpointing or (
            dist.strategy == "fsdp" and dist.fsdp.activation_checkpointing),
        gpu_memory_bytes=gpu_memory_bytes,
        optimizer=_OPTIMIZERS.get(str(extra.get("optim", "adamw")), "adamw"),
        attn_implementation=str(extra.get("attn_impl", "sdpa")),
        liger_kernel=bool(extra.get("use_liger_kernel", False)),
        fsdp_cpu_ram_efficient_loading=dist.fsdp.cpu_ram_efficient_loading,
        trains_on_cpu=on_cpu,
        notes=tuple(notes),
    )
    return calibrate(request, device_kind(on_cpu, dist.gpu_ids), swift_workers(train.dataloader_num_workers),
                     calibration)


def _max_length(profile: LaunchProfile, shape: ModelShape, longest_row: int | None, notes: list[str]) -> int:
    """Tokens per row as swift will batch them. Unset max_length: swift pads each batch to its longest
    row (never to the model's whole context), so the data's longest row, else a stated assumption.
    Packing fills every row up to swift's default, the model's own limit."""
    limit = shape.max_position_embeddings
    if profile.training.max_length is not None:
        return profile.training.max_length
    if _packing(profile):
        notes.append("max_length unset with packing: rows are packed to the model's own limit")
        return limit or ASSUMED_ROW_TOKENS
    if longest_row:
        length = min(longest_row, limit or longest_row)
        notes.append(f"max_length unset: swift pads each batch to its longest row; the data's longest is "
                     f"{longest_row:,} tokens (swift's report)")
        return length
    length = min(ASSUMED_ROW_TOKENS, limit or ASSUMED_ROW_TOKENS)
    notes.append(f"max_length unset: assumed {length:,} tokens per row (swift pads each batch to its longest row, "
                 "and the data's lengths are not known yet: `workbench data inspect` measures them)")
    return length


def _packing(profile: LaunchProfile) -> bool:
    value = profile.extra_swift_args.get("packing", False)
    return value is True or str(value).lower() in ("true", "1")


def known_longest_row(profile: LaunchProfile, base_dir: Path | None,
                      resolved: ResolvedProfile | None = None) -> int | None:
    """The longest training row in tokens from swift's report on the profile's data, when already known
    (`resolved`: the launch's model and datasets, resolved here when None)."""
    try:
        from backend.data.swift_view import known_report, request_for

        report = known_report(request_for(profile, base_dir, build_model=False, resolved=resolved))
    except Exception:  # no data, an unbuilt model, an unreadable file: the lengths are simply not known
        return None
    longest = ((report or {}).get("token_lengths") or {}).get("max")
    return int(longest) if longest else None


def _precision(profile: LaunchProfile, torch_dtype: str | None, notes: list[str], on_cpu: bool) -> str:
    """The precision swift will train in. Unset on a GPU: swift's own rule for the model's dtype,
    as read from swift with its schema (cached; never asked here). Unset on the CPU: fp32, since the
    launch turns both flags off there (backend.launch.command's precision flags)."""
    p = profile.precision
    if p.bf16 is not None or p.fp16 is not None or on_cpu:
        return p.mode
    from backend.oracle.swift_args_answer import precision_by_dtype

    rules = precision_by_dtype()
    dtype_name = {short: name for name, short in _DTYPES.items()}.get(torch_dtype, torch_dtype) if torch_dtype else None
    rule = rules.get(dtype_name) if rules is not None and dtype_name else None
    if rule is None:
        notes.append("precision unset: swift picks it from the model's dtype at launch; this forecast assumes "
                     "fp32 until swift's schema has been read (`workbench schema --swift` reads it)")
        return "fp32"
    notes.append(f"precision unset: swift trains a {dtype_name} model in {rule} (its own rule)")
    return rule


def _offload(profile: LaunchProfile) -> tuple[bool, bool | None]:
    dist = profile.distribution
    if dist.strategy == "fsdp":
        return dist.fsdp.cpu_offload, None
    if dist.strategy == "deepspeed":
        ds = dist.deepspeed
        return ds.offload_optimizer or ds.offload_param, ds.offload_param
    return False, None


def shape_from_profile(profile: LaunchProfile, base_dir: Path | None = None, *, exact: bool = False,
                       progress: Callable[[str], None] | None = None) -> ModelShape:
    """The profile's model shape: built-in, local folder, run:ID, or a hub id already cached.

    `exact=True` asks transformers (one child process the first time, announced through
    `progress`, then cached); `exact=False` never starts a child: the cached exact answer when
    there is one, else the formula (labelled estimated where it is not exact).
    """
    from backend.core.paths import BUILTIN_PREFIX, is_builtin
    from backend.models.refs import resolve_model
    from backend.models.shape_exact import cached_shape, exact_shape, shape_from

    source = profile.model.source
    targets = tuple(profile.tuner.target_modules) or ("all-linear",)
    if is_builtin(source) and not (Path(resolve_model(source)) / "config.json").exists():
        return _builtin_shape(source.removeprefix(BUILTIN_PREFIX), shape_from)
    folder = config_dir_for(source, base_dir)
    if exact:
        return exact_shape(folder, targets, progress=progress)
    return cached_shape(folder, targets)


def _builtin_shape(name: str, shape_from: Callable[..., ModelShape]) -> ModelShape:
    """A built-in model not built yet: its shape from the builder's spec (vocab size approximate)."""
    from backend.models.demo.build import BUILTIN_MODELS
    from backend.models.registry import builtin_config

    if name not in BUILTIN_MODELS:
        raise ConfigError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    return shape_from_config(builtin_config(name), source=f"builtin:{name}")


def config_dir_for(source: str, base_dir: Path | None = None) -> Path:
    """The folder holding the model's config.json (backend.models.refs resolves it); ConfigError if none."""
    from backend.models.refs import model_config_dir

    try:
        return model_config_dir(source, base_dir)
    except LookupError as err:
        raise ConfigError(f"{err.args[0]}; pass --model DIR (a folder holding config.json)") from None
