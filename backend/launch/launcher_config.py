"""accelerate's config file (a ClusterConfig, as `accelerate config` writes it, FSDP block included) and the
DeepSpeed JSON (as ms-swift's own zeroN.json) for a launch; the command builder (backend/launch/command.py) writes
them into the run folder beside the command.
"""

from __future__ import annotations

import json
from typing import Any

from backend.hardware.machine import HardwareInfo, trains_on_cpu
from backend.profile import LaunchProfile

# decoder-layer class per transformers architecture, for FSDP's transformer auto-wrap: the fallback only,
# used when the model_shape oracle has no answer for the model's config (see detect_decoder_layer): a launch is
# built without waiting for the oracle's child process (the launch form builds its preview on every edit), so a
# model nobody asked about yet, a config transformers does not know (remote code such as InternLM2), or a child
# that failed, leaves the class to this table.
DECODER_LAYER_CLASSES = {
    "Qwen2ForCausalLM": "Qwen2DecoderLayer",
    "Qwen3ForCausalLM": "Qwen3DecoderLayer",
    "LlamaForCausalLM": "LlamaDecoderLayer",
    "MistralForCausalLM": "MistralDecoderLayer",
    "GemmaForCausalLM": "GemmaDecoderLayer",
    "Gemma2ForCausalLM": "Gemma2DecoderLayer",
    "Phi3ForCausalLM": "Phi3DecoderLayer",
    "InternLM2ForCausalLM": "InternLM2DecoderLayer",
}


def mixed_precision(profile: LaunchProfile) -> str:
    return {"bf16": "bf16", "fp16": "fp16", "fp32": "no"}[profile.precision.mode]


def accelerate_config(
    profile: LaunchProfile, hardware: HardwareInfo, machine_rank: int, model_dir: str | None = None
) -> dict[str, Any]:
    """A ClusterConfig dict exactly as `accelerate config` writes it.

    DeepSpeed runs go through the torchrun launcher with swift's own `--deepspeed JSON`
    (the way ms-swift documents it), so no deepspeed block appears here. GPU selection is
    carried by CUDA_VISIBLE_DEVICES in the environment, so `gpu_ids` stays `all` and
    accelerate never re-maps it.
    """
    dist = profile.distribution
    cpu = trains_on_cpu(profile.distribution.device, hardware)
    world = dist.world_size
    if dist.strategy == "fsdp" and not cpu:
        distributed_type = "FSDP"
    elif world > 1:
        # several CPU processes also go through the multi-GPU (torchrun) launcher: with
        # `use_cpu` accelerate starts only one process; swift's --use_cpu picks gloo.
        distributed_type = "MULTI_GPU"
    else:
        distributed_type = "NO"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": distributed_type,
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "machine_rank": machine_rank,
        "main_training_function": "main",
        # on CPU, fp16 is run by the workbench plugin's CPU GradScaler, not by accelerate
        "mixed_precision": "no" if cpu and not profile.precision.bf16 else mixed_precision(profile),
        "num_machines": dist.num_machines,
        "num_processes": world,
        "rdzv_backend": dist.rdzv_backend,
        "same_network": True,
        "use_cpu": cpu and world == 1,
        "gpu_ids": "all",
    }
    if dist.num_machines > 1:
        config["main_process_ip"] = dist.main_process_ip
        config["main_process_port"] = dist.main_process_port
    if distributed_type == "FSDP":
        config["fsdp_config"] = fsdp_block(profile, model_dir)
    return config


def detect_decoder_layer(model_dir: str) -> str | None:
    """The decoder-layer class to auto-wrap: transformers' own, as the model_shape oracle answered it for the
    model's config.json (its cached answer: never a child process here; `workbench run` asks it first, see
    backend/runs/start.py), else the table above from config.json's architectures."""
    from backend.estimate.from_profile import config_dir_for
    from backend.models.shape_exact import cached_shape
    from backend.models.shape_formula import ConfigError

    try:
        folder = config_dir_for(model_dir)
    except ConfigError:
        return None  # no config.json to read: nothing to detect
    try:
        shape = cached_shape(folder)
        if shape.exact and shape.decoder_layer_class:
            return shape.decoder_layer_class
    except (ConfigError, OSError):  # a config the planner cannot size may still name its architecture
        pass
    try:
        architectures = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return next((DECODER_LAYER_CLASSES[a] for a in architectures if a in DECODER_LAYER_CLASSES), None)


def fsdp_settings(profile: LaunchProfile, model_dir: str | None = None) -> dict[str, Any]:
    """The profile's [distribution.fsdp] as FSDP settings, named as accelerate's config file names them without
    its `fsdp_` prefix: the one mapping of the profile's FSDP keys, written for accelerate (`fsdp_block`) and
    for swift's `--fsdp FILE` (backend/launchers/torchrun.py `swift_fsdp_config`)."""
    f = profile.distribution.fsdp
    settings: dict[str, Any] = {
        "version": f.version,
        "auto_wrap_policy": f.auto_wrap_policy,
        "cpu_ram_efficient_loading": f.cpu_ram_efficient_loading,
        "offload_params": f.cpu_offload,
        "state_dict_type": f.state_dict_type,
        "activation_checkpointing": f.activation_checkpointing,
    }
    if f.version == 1:
        settings |= {
            "sharding_strategy": f.sharding_strategy,
            "backward_prefetch": f.backward_prefetch,
            "forward_prefetch": f.forward_prefetch,
            "sync_module_states": f.sync_module_states,
            "use_orig_params": f.use_orig_params,
        }
    else:
        # FSDP2 expresses the strategy as whether parameters are resharded after forward
        settings["reshard_after_forward"] = f.sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
    if f.auto_wrap_policy == "TRANSFORMER_BASED_WRAP":
        # without a class, accelerate wraps the model's own `_no_split_modules`
        layer = f.transformer_layer_cls_to_wrap or (detect_decoder_layer(model_dir) if model_dir else None)
        if layer:
            settings["transformer_layer_cls_to_wrap"] = layer
    elif f.auto_wrap_policy == "SIZE_BASED_WRAP":
        settings["min_num_params"] = f.min_num_params
    return settings


def fsdp_block(profile: LaunchProfile, model_dir: str | None = None) -> dict[str, Any]:
    """accelerate's `fsdp_config` block: the settings with accelerate's `fsdp_` prefix."""
    return {f"fsdp_{key}": value for key, value in fsdp_settings(profile, model_dir).items()}


def deepspeed_config(profile: LaunchProfile) -> dict[str, Any]:
    """A ZeRO-0/1/2/3 JSON as ms-swift's own `zeroN.json` write it ('auto' values are
    filled by the HF Trainer from the training arguments)."""
    ds = profile.distribution.deepspeed
    zero: dict[str, Any] = {
        "stage": ds.stage,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if ds.stage == 3:
        zero |= {
            "sub_group_size": 1e9,
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
            "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9,
            "stage3_gather_16bit_weights_on_model_save": True,
        }
        if ds.offload_param:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    else:
        zero |= {"allgather_partitions": True, "allgather_bucket_size": 2e8, "reduce_scatter": True}
    return {
        "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
                 "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "steps_per_print": 2000,
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "wall_clock_breakdown": False,
    }
