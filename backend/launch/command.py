"""Profile -> the exact launch: `accelerate launch --config_file CFG -m swift.cli.sft ...`.

The result is an argv list (never a shell string), the environment variables added to the
inherited ones, the working directory, and the accelerate config as a dict in accelerate's
own YAML format. An accelerate config file is always passed, even for one process, so a
user's `~/.cache/huggingface/accelerate/default_config.yaml` can never change a run
behind the workbench's back.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.contract.flight_recorder import flight_recorder_env
from backend.core.fs import write_text_atomic
from backend.core.paths import BUILTIN_SWIFT_TYPES, PACKAGE_DIR, is_builtin
from backend.core.safe_text import is_secret_name, masked, redact_words
from backend.hardware.machine import HardwareInfo, trains_on_cpu, visible_devices_env
from backend.launch.launcher_config import accelerate_config, deepspeed_config
from backend.models.resolved import ResolvedProfile, resolve_datasets, resolve_profile
from backend.profile import LaunchProfile

PLUGIN_PATH = PACKAGE_DIR / "plugin" / "workbench_callback.py"
PLUGIN_CALLBACK_NAME = "workbench_events"
ACCELERATE_CONFIG_NAME = "accelerate_config.yaml"
DEEPSPEED_CONFIG_NAME = "deepspeed_config.json"
# environment variables the workbench sets itself or that a profile key decides
RESERVED_ENV = {"CUDA_VISIBLE_DEVICES": "distribution.gpu_ids", "NPROC_PER_NODE": "distribution.nproc_per_node",
                "NNODES": "distribution.num_machines", "NODE_RANK": "distribution.machine_rank",
                "MASTER_ADDR": "distribution.main_process_ip", "MASTER_PORT": "distribution.main_process_port",
                "PYTHONUNBUFFERED": "the workbench (logs must reach output.log at once)",
                "TOKENIZERS_PARALLELISM": "the workbench (tokenizer threads in forked workers deadlock)"}

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
    flags: list[SwiftFlag] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # the words extra_swift_args adds
    launcher: str = "accelerate"

    def shell_line(self) -> str:
        """One copy-pasteable, correctly quoted shell line (environment first). A secret variable reads the
        pasting shell's own value (`HF_TOKEN="$HF_TOKEN"`); control characters are `$'...'` escapes."""
        from backend.core.shell_words import ShellVar, join, quote
        assignments = [f"{key}={quote(ShellVar(key) if is_secret_name(key) else value)}"
                       for key, value in sorted(self.env.items())]
        return " ".join([*assignments, join(list(self.redacted_argv()))])

    def redacted_argv(self) -> list[str]:
        """argv with the value of a secret flag (`--hub_token`, refused by validate) as ***."""
        return redact_words(self.argv)

    def forced(self) -> list[SwiftFlag]:
        """The flags the workbench passes whatever the profile says, each with its reason."""
        return [flag for flag in self.flags if flag.forced]

    def as_json(self) -> dict[str, Any]:
        """`workbench show --json`: what runs, secrets as ***."""
        return {"argv": self.redacted_argv(), "env": self.redacted_env(), "accelerate_config": self.accelerate_config,
                "launcher": self.launcher}

    def accelerate_yaml(self) -> str:
        return yaml.safe_dump(self.accelerate_config, sort_keys=True)

    def write_configs(self) -> None:
        """Write the accelerate (and DeepSpeed) config files the argv points at."""
        self.accelerate_config_path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.accelerate_config_path, self.accelerate_yaml())
        if self.deepspeed_config is not None and self.deepspeed_config_path is not None:
            write_text_atomic(self.deepspeed_config_path, json.dumps(self.deepspeed_config, indent=2))

    def redacted_env(self) -> dict[str, str]:
        return {k: ("***" if is_secret_name(k) else v) for k, v in self.env.items()}


def build_launch(
    profile: LaunchProfile,
    run_dir: Path,
    hardware: HardwareInfo,
    *,
    base_dir: Path | None = None,
    machine_rank: int | None = None,
    python: str = sys.executable,
    model_path: str | None = None,
    resolved: ResolvedProfile | None = None,
) -> LaunchPlan:
    """Build the launch of `profile` whose files live in `run_dir`.

    `base_dir` resolves relative paths in the profile (the profile file's folder);
    `machine_rank` overrides the profile's for per-node commands; `resolved`: the model and datasets as the
    launch resolved them once (resolved here when None).
    """
    if model_path is None:
        resolved = resolved or resolve_profile(profile, base_dir)
        model_path = resolved.model_arg
    run_dir = run_dir.resolve()
    output_dir = Path(profile.output.output_dir).expanduser() if profile.output.output_dir else run_dir / "output"
    if not output_dir.is_absolute():
        output_dir = ((base_dir or Path.cwd()) / output_dir).resolve()
    rank = profile.distribution.machine_rank if machine_rank is None else machine_rank
    model = model_path
    config = accelerate_config(profile, hardware, rank, model_dir=model)
    config_path = run_dir / ACCELERATE_CONFIG_NAME
    ds = profile.distribution.deepspeed
    own_ds = profile.distribution.strategy == "deepspeed" and not ds.config
    ds_config = deepspeed_config(profile) if own_ds else None
    ds_path = run_dir / DEEPSPEED_CONFIG_NAME if ds_config else None
    flags = swift_flags(profile, hardware, model=model, output_dir=output_dir, base_dir=base_dir, ds_path=ds_path,
                        resolved=resolved)
    argv = [
        python, "-m", "accelerate.commands.launch", "--config_file", str(config_path),
        *rendezvous_args(profile, rank),
        "-m", f"swift.cli.{profile.task}",
        *(word for flag in flags for word in flag.words()), *(extra := extra_args(profile)),
    ]
    env = launch_env(profile, run_dir)
    return LaunchPlan(
        argv=argv, env=env, cwd=str(run_dir), accelerate_config=config, accelerate_config_path=config_path,
        output_dir=output_dir, deepspeed_config=ds_config, deepspeed_config_path=ds_path, flags=flags,
        extra=extra,
    )


def rendezvous_args(profile: LaunchProfile, machine_rank: int) -> list[str]:
    """accelerate launch flags that place this machine in a multi-machine run.

    On the command line, not only in the config file: accelerate ignores the config's
    `rdzv_backend` (its argparse default is not None, so the file never fills it in), and
    with the rank on the line each machine's command says which machine it is.
    """
    d = profile.distribution
    if d.num_machines == 1:
        # one machine: the rendezvous port only when the profile sets it (two runs side by side)
        set_port = "main_process_port" in d.model_fields_set and d.world_size > 1
        return ["--main_process_port", str(d.main_process_port)] if set_port else []
    return ["--machine_rank", str(machine_rank), "--main_process_ip", d.main_process_ip,
            "--main_process_port", str(d.main_process_port), "--rdzv_backend", d.rdzv_backend]


def launch_env(profile: LaunchProfile, run_dir: Path) -> dict[str, str]:
    env = {
        "WORKBENCH_RUN_DIR": str(run_dir),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for key, value in profile.env.items():
        if is_secret_name(key):
            value = os.environ.get(key, "")  # a secret is read at launch, never stored in the profile
        env[key] = value
    if profile.distribution.gpu_ids:
        env.update(visible_devices_env(profile.distribution.gpu_ids))
    if profile.precision.fp16:
        env["WORKBENCH_LOSS_SCALE_INIT"] = repr(profile.precision.loss_scale_init)
        env["WORKBENCH_LOSS_SCALE_GROWTH_INTERVAL"] = str(profile.precision.loss_scale_growth_interval)
    if profile.debug.inject_overflow_steps:
        env["WORKBENCH_INJECT_OVERFLOW_STEPS"] = ",".join(map(str, profile.debug.inject_overflow_steps))
    if profile.distribution.world_size > 1 and profile.watch.flight_recorder:  # a value in [env] wins (#39)
        env.update({k: v for k, v in flight_recorder_env(run_dir).items() if k not in profile.env})
    return env


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _text(value: Any) -> str:
    return _bool(value) if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class SwiftFlag:
    """One `swift sft` flag of a launch, with where it comes from.

    `key` is the profile key that decides it (empty when none does); `reason` is set when the
    workbench passes the flag whether or not the profile sets anything (paths, plugin, CPU flags).
    """

    name: str
    values: tuple[str, ...]
    key: str = ""
    reason: str = ""
    equals: bool = False  # rendered `--name=value`: a value beginning with '-' stays a value

    def words(self) -> list[str]:
        """The argv words; a value swift's parser would take for a flag raises `FlagLikeValue`."""
        if self.equals:
            return [f"--{self.name}={self.values[0]}"]
        dashed = self.flag_like()
        if dashed is not None:
            raise FlagLikeValue(self, dashed)
        return [f"--{self.name}", *self.values]

    def flag_like(self) -> str | None:
        """The first value that would reach swift as a flag of its own (`--tuner_type=full` in a list)."""
        from backend.launch.swift_schema import reads_as_flag

        return None if self.equals else next((v for v in self.values if reads_as_flag(v)), None)

    @property
    def forced(self) -> bool:
        return bool(self.reason)


class FlagLikeValue(ValueError):
    """A profile value that would reach swift's parser as a flag: the launch is not built."""

    def __init__(self, flag: SwiftFlag, value: str) -> None:
        self.flag, self.value = flag, value
        where = flag.key or f"--{flag.name}"
        super().__init__(f"[{where}] value {masked(value, where)!r} begins with '-'; swift's parser would read it "
                         "as a flag of "
                         f"its own, not as a value of --{flag.name}")


def flag_like_values(profile: LaunchProfile, hardware: HardwareInfo) -> list[FlagLikeValue]:
    """Every value of a profile key the builder would pass where swift reads a flag (validate names each by
    its key; extra_swift_args has its own check, backend.launch.swift_schema.extra_problems)."""
    try:
        flags = swift_flags(profile, hardware, model=profile.model.source, output_dir=Path("/o"), base_dir=None,
                            ds_path=None)
    except (KeyError, OSError, RuntimeError):  # an unknown built-in dataset, a path loop: their own rules say so
        return []
    return [FlagLikeValue(flag, value) for flag in flags if (value := flag.flag_like()) is not None]


class _Flags:
    def __init__(self) -> None:
        self.items: list[SwiftFlag] = []

    def set(self, name: str, value: Any, key: str, *, equals: bool = False) -> None:
        """Pass `--name value` (not None)."""
        if value is None:
            return
        values = tuple(_text(v) for v in value) if isinstance(value, (list, tuple)) else (_text(value),)
        self.items.append(SwiftFlag(name, values, key, equals=equals))

    def given(self, section: Any, name: str, flag: str | None = None, *, prefix: str, equals: bool = False) -> None:
        """Pass the profile key `prefix.name` only when the profile sets it (never a workbench default)."""
        if name in section.model_fields_set:
            self.set(flag or name, getattr(section, name), f"{prefix}.{name}", equals=equals)

    def force(self, name: str, value: Any, reason: str, key: str = "") -> None:
        values = tuple(_text(v) for v in value) if isinstance(value, (list, tuple)) else (_text(value),)
        self.items.append(SwiftFlag(name, values, key, reason=reason))


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
    flags = swift_flags(profile, hardware, model=model, output_dir=output_dir, base_dir=base_dir, ds_path=ds_path)
    return [word for flag in flags for word in flag.words()] + extra_args(profile)


def extra_args(profile: LaunchProfile) -> list[str]:
    return [word for flag in extra_flags(profile) for word in flag.words()]


def extra_flags(profile: LaunchProfile) -> list[SwiftFlag]:
    from backend.launch.swift_schema import extra_groups, load_schema

    return [SwiftFlag(name, tuple(values), f"extra_swift_args.{name}", equals=equals)
            for name, values, equals in extra_groups(profile.extra_swift_args, load_schema(allow_ask=False))]


def swift_flags(
    profile: LaunchProfile,
    hardware: HardwareInfo,
    *,
    model: str,
    output_dir: Path,
    base_dir: Path | None,
    ds_path: Path | None,
    resolved: ResolvedProfile | None = None,
) -> list[SwiftFlag]:
    """The flags the profile decides, each with its profile key, and the ones the workbench forces
    (`resolved`: the launch's datasets as resolved once; resolved here when None)."""
    m, d, p, tr = profile.model, profile.data, profile.precision, profile.training
    train, val = (resolved.train, resolved.val) if resolved else resolve_datasets(d, base_dir)
    f = _Flags()
    f.force("model", model, "an absolute path or hub id: a relative one breaks a later export/infer", "model.source")
    builtin = is_builtin(m.source)
    for name, known in zip(("model_type", "template"), BUILTIN_SWIFT_TYPES, strict=True):
        if builtin and getattr(m, name) is None:
            f.force(name, known, "the built-in model is the workbench's own Qwen2: swift alone sees two model types "
                    "(qwen2, qwen2_gte) and would stop at launch", f"model.{name}")
        else:
            f.set(name, getattr(m, name), f"model.{name}")
    f.set("system", m.system, "model.system", equals=True)
    for name in ("model_author", "model_name"):
        f.set(name, getattr(m, name), f"model.{name}")
    f.set("torch_dtype", None if m.torch_dtype == "auto" else m.torch_dtype, "model.torch_dtype")
    f.force("dataset", [found.for_swift() for found in train],
            "absolute paths: swift resolves relative ones against its own working directory", "data.train")
    if val:
        f.set("val_dataset", [found.for_swift() for found in val], "data.val")
    f.given(d, "split_dataset_ratio", prefix="data")
    _tuner_flags(profile, f)
    _precision_flags(profile, hardware, f)
    f.given(p, "tf32", prefix="precision")
    for name in ("num_train_epochs", "max_steps", "per_device_train_batch_size", "per_device_eval_batch_size",
                 "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "warmup_ratio",
                 "weight_decay", "max_grad_norm", "max_length", "gradient_checkpointing"):
        f.given(tr, name, prefix="training")
    if tr.gradient_checkpointing is not False and tr.gradient_checkpointing_use_reentrant is not None:
        f.set("gradient_checkpointing_kwargs", json.dumps({"use_reentrant": tr.gradient_checkpointing_use_reentrant}),
              "training.gradient_checkpointing_use_reentrant")
    for name in ("logging_steps", "eval_steps", "save_steps", "save_total_limit", "metric_for_best_model",
                 "greater_is_better", "early_stop_interval", "seed", "dataloader_num_workers"):
        f.given(tr, name, prefix="training")
    f.force("output_dir", str(output_dir), "checkpoints go to the run folder (or output.output_dir)",
            "output.output_dir")
    f.force("report_to", profile.output.report_to,
            "the workbench records metrics itself; swift's default would start tensorboard", "output.report_to")
    f.force("add_version", False, "otherwise swift writes into a v0-<timestamp> subfolder the workbench cannot find")
    f.force("check_model", False, "otherwise swift asks the hub about the model and waits ~7 s offline")
    ds = profile.distribution.deepspeed
    if ds_path is not None:
        f.force("deepspeed", str(ds_path), "the DeepSpeed JSON the workbench wrote into the run folder",
                "distribution.deepspeed")
    elif profile.distribution.strategy == "deepspeed" and ds.config:
        f.set("deepspeed", deepspeed_reference(ds.config, base_dir), "distribution.deepspeed.config")
    if trains_on_cpu(profile.distribution.device, hardware):
        f.force("use_cpu", True, "CPU run: without it several processes train independently into one folder",
                "distribution.device")
    f.force("external_plugins", str(PLUGIN_PATH), "the workbench's callback that writes events.jsonl")
    f.force("callbacks", PLUGIN_CALLBACK_NAME, "the workbench's callback that writes events.jsonl")
    return f.items


def _precision_flags(profile: LaunchProfile, hardware: HardwareInfo, f: _Flags) -> None:
    p = profile.precision
    if p.bf16 is None and p.fp16 is None and trains_on_cpu(profile.distribution.device, hardware):
        reason = "CPU run: swift's own rule turns fp16 on, which accelerate then silently runs in fp32"
        f.force("bf16", False, reason, "precision.bf16")
        f.force("fp16", False, reason, "precision.fp16")
        return
    f.set("bf16", p.bf16, "precision.bf16")
    f.set("fp16", p.fp16, "precision.fp16")


def swift_tuner_type(profile: LaunchProfile) -> str:
    """The `--tuner_type` the builder passes (QLoRA is swift's lora over a quantized model)."""
    return "full" if profile.tuner.type == "full" else "lora"


def _tuner_flags(profile: LaunchProfile, f: _Flags) -> None:
    t = profile.tuner
    f.set("tuner_type", swift_tuner_type(profile), "tuner.type")
    if t.type == "full":
        return
    for name in ("lora_rank", "lora_alpha", "lora_dropout", "target_modules"):
        f.given(t, name, prefix="tuner")
    if t.type == "qlora":
        f.set("quant_method", t.quant_method, "tuner.quant_method")
        f.set("quant_bits", t.quant_bits, "tuner.quant_bits")
        if t.quant_bits == 4:
            for name in ("bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype",
                         "bnb_4bit_quant_storage"):
                f.given(t, name, prefix="tuner")


def deepspeed_reference(config: str, base_dir: Path | None) -> str:
    """swift's preset name as is (swift resolves it in its own config folder), a JSON file as an absolute path."""
    if config.endswith(".json") or "/" in config:
        path = Path(config).expanduser()
        return str(path if path.is_absolute() else ((base_dir or Path.cwd()) / path).resolve())
    return config
