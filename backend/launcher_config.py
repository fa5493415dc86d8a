"""accelerate's config file (a ClusterConfig, as `accelerate config` writes it, FSDP block included) and the
DeepSpeed JSON (as ms-swift's own zeroN.json) for a launch; the command builder (backend/command.py) writes
them into the run folder beside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.hardware import HardwareInfo
from backend.profile import LaunchProfile

# decoder-layer class per transformers architecture, for FSDP's transformer auto-wrap
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


def uses_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> bool:
    device = profile.distribution.device
    return device == "cpu" or (device == "auto" and not hardware.has_cuda)


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
    cpu = uses_cpu(profile, hardware)
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
    """The decoder-layer class to auto-wrap, from config.json's architectures."""
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (OSError, json.JSONDecodeError):
        return None
    return next((DECODER_LAYER_CLASSES[a] for a in architectures if a in DECODER_LAYER_CLASSES), None)


def fsdp_block(profile: LaunchProfile, model_dir: str | None = None) -> dict[str, Any]:
    f = profile.distribution.fsdp
    block: dict[str, Any] = {
        "fsdp_version": f.version,
        "fsdp_auto_wrap_policy": f.auto_wrap_policy,
        "fsdp_cpu_ram_efficient_loading": f.cpu_ram_efficient_loading,
        "fsdp_offload_params": f.cpu_offload,
        "fsdp_state_dict_type": f.state_dict_type,
        "fsdp_activation_checkpointing": f.activation_checkpointing,
    }
    if f.version == 1:
        block |= {
            "fsdp_sharding_strategy": f.sharding_strategy,
            "fsdp_backward_prefetch": f.backward_prefetch,
            "fsdp_forward_prefetch": f.forward_prefetch,
            "fsdp_sync_module_states": f.sync_module_states,
            "fsdp_use_orig_params": f.use_orig_params,
        }
    else:
        # FSDP2 expresses the strategy as whether parameters are resharded after forward
        block["fsdp_reshard_after_forward"] = f.sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
    if f.auto_wrap_policy == "TRANSFORMER_BASED_WRAP":
        # without a class, accelerate wraps the model's own `_no_split_modules`
        layer = f.transformer_layer_cls_to_wrap or (detect_decoder_layer(model_dir) if model_dir else None)
        if layer:
            block["fsdp_transformer_layer_cls_to_wrap"] = layer
    elif f.auto_wrap_policy == "SIZE_BASED_WRAP":
        block["fsdp_min_num_params"] = f.min_num_params
    return block


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
