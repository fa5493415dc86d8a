"""Profile -> the exact launch: `accelerate launch --config_file CFG -m swift.cli.sft ...`.

The result is an argv list (never a shell string), the environment variables added to the
inherited ones, the working directory, and the accelerate config as a dict in accelerate's
own YAML format. An accelerate config file is always passed, even for one process, so a
user's `~/.cache/huggingface/accelerate/default_config.yaml` can never change a run
behind the workbench's back.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.hardware import HardwareInfo, visible_devices_env
from backend.paths import PACKAGE_DIR, resolve_dataset, resolve_model
from backend.profile import LaunchProfile

PLUGIN_PATH = PACKAGE_DIR / "plugin" / "workbench_callback.py"
PLUGIN_CALLBACK_NAME = "workbench_events"
ACCELERATE_CONFIG_NAME = "accelerate_config.yaml"
DEEPSPEED_CONFIG_NAME = "deepspeed_config.json"
SECRET_ENV_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY")

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


@dataclass
class LaunchPlan:
    """Everything needed to start one process of a run, and to show it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    accelerate_config: dict[str, Any]
    accelerate_config_path: Path
    output_dir: Path
    deepspeed_config: dict[str, Any] | None = None
    deepspeed_config_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def shell_line(self) -> str:
        """One copy-pasteable, correctly quoted shell line (environment first)."""
        assignments = [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        return " ".join([*assignments, shlex.join(self.argv)])

    def accelerate_yaml(self) -> str:
        return yaml.safe_dump(self.accelerate_config, sort_keys=True)

    def write_configs(self) -> None:
        """Write the accelerate (and DeepSpeed) config files the argv points at."""
        self.accelerate_config_path.parent.mkdir(parents=True, exist_ok=True)
        self.accelerate_config_path.write_text(self.accelerate_yaml(), encoding="utf-8")
        if self.deepspeed_config is not None and self.deepspeed_config_path is not None:
            self.deepspeed_config_path.write_text(json.dumps(self.deepspeed_config, indent=2), encoding="utf-8")

    def redacted_env(self) -> dict[str, str]:
        return {k: ("***" if any(m in k.upper() for m in SECRET_ENV_MARKERS) else v) for k, v in self.env.items()}


def uses_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> bool:
    device = profile.distribution.device
    return device == "cpu" or (device == "auto" and not hardware.has_cuda)


def build_launch(
    profile: LaunchProfile,
    run_dir: Path,
    hardware: HardwareInfo,
    *,
    base_dir: Path | None = None,
    machine_rank: int | None = None,
    python: str = sys.executable,
    model_path: str | None = None,
) -> LaunchPlan:
    """Build the launch of `profile` whose files live in `run_dir`.

    `base_dir` resolves relative paths in the profile (the profile file's folder);
    `machine_rank` overrides the profile's for per-node commands.
    """
    run_dir = run_dir.resolve()
    output_dir = Path(profile.output.output_dir).expanduser() if profile.output.output_dir else run_dir / "output"
    if not output_dir.is_absolute():
        output_dir = ((base_dir or Path.cwd()) / output_dir).resolve()
    rank = profile.distribution.machine_rank if machine_rank is None else machine_rank
    model = model_path or resolve_model(profile.model.source, base_dir)
    config = accelerate_config(profile, hardware, rank, model_dir=model)
    config_path = run_dir / ACCELERATE_CONFIG_NAME
    ds_config = deepspeed_config(profile) if profile.distribution.strategy == "deepspeed" else None
    ds_path = run_dir / DEEPSPEED_CONFIG_NAME if ds_config else None
    argv = [
        python, "-m", "accelerate.commands.launch", "--config_file", str(config_path),
        *rendezvous_args(profile, rank),
        "-m", "swift.cli.sft",
        *swift_sft_args(profile, hardware, model=model, output_dir=output_dir, base_dir=base_dir, ds_path=ds_path),
    ]
    env = launch_env(profile, run_dir)
    return LaunchPlan(
        argv=argv, env=env, cwd=str(run_dir), accelerate_config=config, accelerate_config_path=config_path,
        output_dir=output_dir, deepspeed_config=ds_config, deepspeed_config_path=ds_path,
    )


def rendezvous_args(profile: LaunchProfile, machine_rank: int) -> list[str]:
    """accelerate launch flags that place this machine in a multi-machine run.

    On the command line, not only in the config file: accelerate ignores the config's
    `rdzv_backend` (its argparse default is not None, so the file never fills it in), and
    with the rank on the line each machine's command says which machine it is.
    """
    d = profile.distribution
    if d.num_machines == 1:
        return []
    return ["--machine_rank", str(machine_rank), "--main_process_ip", d.main_process_ip,
            "--main_process_port", str(d.main_process_port), "--rdzv_backend", d.rdzv_backend]


def launch_env(profile: LaunchProfile, run_dir: Path) -> dict[str, str]:
    env = {
        "WORKBENCH_RUN_DIR": str(run_dir),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if profile.distribution.gpu_ids:
        env.update(visible_devices_env(profile.distribution.gpu_ids))
    if profile.precision.fp16:
        env["WORKBENCH_LOSS_SCALE_INIT"] = repr(profile.precision.loss_scale_init)
        env["WORKBENCH_LOSS_SCALE_GROWTH_INTERVAL"] = str(profile.precision.loss_scale_growth_interval)
    if profile.debug.inject_overflow_steps:
        env["WORKBENCH_INJECT_OVERFLOW_STEPS"] = ",".join(map(str, profile.debug.inject_overflow_steps))
    return env


def _bool(value: bool) -> str:
    return "true" if value else "false"


def swift_sft_args(
    profile: LaunchProfile,
    hardware: HardwareInfo,
    *,
    model: str,
    output_dir: Path,
    base_dir: Path | None,
    ds_path: Path | None,
) -> list[str]:
    """`swift sft` arguments with ms-swift 4.x names, every path absolute."""
    m, d, p, tr = profile.model, profile.data, profile.precision, profile.training
    args: list[str] = ["--model", model]
    for name in ("model_type", "template", "system", "model_author", "model_name"):
        if getattr(m, name):
            args += [f"--{name}", str(getattr(m, name))]
    if m.torch_dtype != "auto":
        args += ["--torch_dtype", m.torch_dtype]
    args += ["--dataset", *(resolve_dataset(ref, base_dir) for ref in d.train)]
    if d.val:
        args += ["--val_dataset", *(resolve_dataset(ref, base_dir) for ref in d.val)]
    args += ["--split_dataset_ratio", repr(d.split_dataset_ratio)]
    args += _tuner_args(profile)
    # always explicit: swift turns fp16 on by itself for fp32 models otherwise
    args += ["--bf16", _bool(p.bf16), "--fp16", _bool(p.fp16)]
    if p.tf32:
        args += ["--tf32", "true"]
    args += [
        "--num_train_epochs", repr(tr.num_train_epochs),
        "--max_steps", str(tr.max_steps),
        "--per_device_train_batch_size", str(tr.per_device_train_batch_size),
        "--per_device_eval_batch_size", str(tr.per_device_eval_batch_size),
        # explicit: swift's default is 16 / batch size
        "--gradient_accumulation_steps", str(tr.gradient_accumulation_steps),
        "--learning_rate", repr(tr.learning_rate),
        "--lr_scheduler_type", tr.lr_scheduler_type,
        "--warmup_ratio", repr(tr.warmup_ratio),
        "--weight_decay", repr(tr.weight_decay),
        "--max_grad_norm", repr(tr.max_grad_norm),
        "--max_length", str(tr.max_length),
        "--gradient_checkpointing", _bool(tr.gradient_checkpointing),
    ]
    if tr.gradient_checkpointing and tr.gradient_checkpointing_use_reentrant is not None:
        kwargs = json.dumps({"use_reentrant": tr.gradient_checkpointing_use_reentrant})
        args += ["--gradient_checkpointing_kwargs", kwargs]
    args += [
        "--logging_steps", str(tr.logging_steps),
        "--eval_steps", str(tr.eval_steps),
        "--save_steps", str(tr.save_steps),
        "--save_total_limit", str(tr.save_total_limit),
        "--seed", str(tr.seed),
        "--dataloader_num_workers", str(tr.dataloader_num_workers),
        "--output_dir", str(output_dir),
        "--report_to", *profile.output.report_to,
        "--add_version", "false",
        # otherwise swift asks the hub about the model and waits ~7 s offline
        "--check_model", "false",
    ]
    if ds_path is not None:
        args += ["--deepspeed", str(ds_path)]
    if uses_cpu(profile, hardware):
        args += ["--use_cpu", "true"]
    args += ["--external_plugins", str(PLUGIN_PATH), "--callbacks", PLUGIN_CALLBACK_NAME]
    for key, value in profile.extra_swift_args.items():
        values = value if isinstance(value, list) else [value]
        args += [f"--{key}", *(_bool(v) if isinstance(v, bool) else str(v) for v in values)]
    return args


def _tuner_args(profile: LaunchProfile) -> list[str]:
    t = profile.tuner
    if t.type == "full":
        return ["--tuner_type", "full"]
    args = [
        "--tuner_type", "lora",
        "--lora_rank", str(t.lora_rank),
        "--lora_alpha", str(t.lora_alpha),
        "--lora_dropout", repr(t.lora_dropout),
        "--target_modules", *t.target_modules,
    ]
    if t.type == "qlora":
        args += ["--quant_method", t.quant_method, "--quant_bits", str(t.quant_bits)]
        if t.quant_bits == 4:
            args += [
                "--bnb_4bit_quant_type", t.bnb_4bit_quant_type,
                "--bnb_4bit_use_double_quant", _bool(t.bnb_4bit_use_double_quant),
                "--bnb_4bit_compute_dtype", t.bnb_4bit_compute_dtype,
            ]
            if t.bnb_4bit_quant_storage:
                args += ["--bnb_4bit_quant_storage", t.bnb_4bit_quant_storage]
    return args


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
    """A ZeRO-2/3 JSON as ms-swift's own `zero2.json`/`zero3.json` write it ('auto' values are
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
