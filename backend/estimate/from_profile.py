"""Bridge from a launch profile (backend/profile.py) to the planner's inputs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from backend.estimate.request import EstimateRequest
from backend.estimate.shape import ConfigError, ModelShape

if TYPE_CHECKING:
    from backend.profile import LaunchProfile

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_OPTIMIZERS = {"adamw_torch": "adamw_foreach", "adamw_torch_fused": "adamw", "adamw": "adamw",
               "paged_adamw_32bit": "paged_adamw_32bit"}


def request_from_profile(profile: LaunchProfile, shape: ModelShape,
                         gpu_memory_bytes: int | None = None) -> EstimateRequest:
    """The EstimateRequest a profile describes (its field names follow ms-swift / accelerate)."""
    tuner, dist, train = profile.tuner, profile.distribution, profile.training
    extra = profile.extra_swift_args
    notes: list[str] = []
    torch_dtype = _DTYPES.get(profile.model.torch_dtype) or shape.torch_dtype
    if dist.device == "cpu":
        notes.append("profile runs on CPU: the GPU forecast does not apply, the host figures do")
    offload, offload_param = _offload(profile)
    return EstimateRequest(
        tuner=tuner.type,
        lora_rank=tuner.lora_rank,
        lora_alpha=tuner.lora_alpha,
        lora_dropout=tuner.lora_dropout,
        target_modules=tuple(tuner.target_modules),
        quant_bits=tuner.quant_bits,
        double_quant=tuner.bnb_4bit_use_double_quant,
        precision=profile.precision.mode,
        torch_dtype=torch_dtype,
        distribution=dist.strategy,
        fsdp_strategy=dist.fsdp.sharding_strategy,
        zero_stage=dist.deepspeed.stage,
        offload=offload,
        offload_param=offload_param,
        num_gpus=dist.nproc_per_node if dist.strategy != "single" else 1,
        num_nodes=dist.num_machines if dist.strategy != "single" else 1,
        batch_size=train.per_device_train_batch_size,
        # unset: swift's default, the model's own limit
        max_length=train.max_length or shape.max_position_embeddings or 2048,
        gradient_checkpointing=train.gradient_checkpointing or (
            dist.strategy == "fsdp" and dist.fsdp.activation_checkpointing),
        gpu_memory_bytes=gpu_memory_bytes,
        optimizer=_OPTIMIZERS.get(str(extra.get("optim", "adamw")), "adamw"),
        attn_implementation=str(extra.get("attn_impl", "sdpa")),
        liger_kernel=bool(extra.get("use_liger_kernel", False)),
        fsdp_cpu_ram_efficient_loading=dist.fsdp.cpu_ram_efficient_loading,
        notes=tuple(notes),
    )


def _offload(profile: LaunchProfile) -> tuple[bool, bool | None]:
    dist = profile.distribution
    if dist.strategy == "fsdp":
        return dist.fsdp.cpu_offload, None
    if dist.strategy == "deepspeed":
        ds = dist.deepspeed
        return ds.offload_optimizer or ds.offload_param, ds.offload_param
    return False, None


def shape_from_profile(profile: LaunchProfile, base_dir: Path | None = None) -> ModelShape:
    """Find the profile's config.json: a local folder, a built-in model, or a hub id already cached."""
    from backend.paths import BUILTIN_PREFIX, is_builtin, resolve_model

    source = profile.model.source
    if is_builtin(source) and not (Path(resolve_model(source)) / "config.json").exists():
        return _builtin_shape(source.removeprefix(BUILTIN_PREFIX))
    return ModelShape.from_config_dir(config_dir_for(source, base_dir))


def _builtin_shape(name: str) -> ModelShape:
    """A built-in model not built yet: its shape from the builder's spec (vocab size approximate)."""
    from backend.demo.build import BUILTIN_MODELS

    if name not in BUILTIN_MODELS:
        raise ConfigError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    spec = BUILTIN_MODELS[name]
    return ModelShape.from_config_dict({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size, "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_key_value_heads,
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }, source=f"builtin:{name}")


def config_dir_for(source: str, base_dir: Path | None = None) -> Path:
    from backend.paths import is_builtin, resolve_model

    if is_builtin(source):
        path = Path(resolve_model(source))
        if (path / "config.json").exists():
            return path
        raise ConfigError(f"built-in model {source!r} is not built yet ({path}); run it once or pass --model DIR")
    resolved = resolve_model(source, base_dir)
    if Path(resolved).exists():
        return Path(resolved)
    cached = _cached_hub_config(source)
    if cached is None:
        raise ConfigError(f"model {source!r} is a hub id with no local copy of its config.json; "
                          "pass --model DIR (a folder holding config.json)")
    return cached


def _cached_hub_config(repo_id: str) -> Path | None:
    """config.json of a hub model already in the Hugging Face or ModelScope cache, if any."""
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    hf_hub = Path(os.environ.get("HF_HUB_CACHE", hf_home / "hub"))
    snapshots = hf_hub / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    candidates = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    ms_home = Path(os.environ.get("MODELSCOPE_CACHE", Path.home() / ".cache" / "modelscope"))
    candidates += [ms_home / "hub" / "models" / repo_id / "config.json", ms_home / "hub" / repo_id / "config.json"]
    return next((p.parent for p in candidates if p.exists()), None)
