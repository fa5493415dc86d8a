"""`workbench import`, the launcher's part: what the environment prefix (CUDA_VISIBLE_DEVICES, NPROC_PER_NODE,
NNODES, MASTER_ADDR ...) and the launcher (torchrun's flags, accelerate's flags and --config_file) say, carried
into the profile's [env] and [distribution]. The swift flags are backend/importing/swift_flags.py's."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.importing.shell_script import SwiftCommand, is_number
from backend.launch.swift_schema import is_secret_name


@dataclass
class Said:
    """What an import says: notes (carried, with a change) and refusals (not carried: nothing is written)."""

    notes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)



def read_launcher(command: SwiftCommand, data: dict[str, Any], said: Said, base_dir: Path | None) -> None:
    """The command's environment prefix and launcher (torchrun, accelerate and its config file) into
    `data`'s [env] and [distribution]; what cannot be carried goes to `said.refused`."""
    dist: dict[str, Any] = {}
    env = dict(command.env)
    _swift_env(env, dist, said)
    if command.launcher == "torchrun":
        _torchrun(command.launcher_args, dist, said)
    elif command.launcher == "accelerate":
        _accelerate(command.launcher_args, dist, said, base_dir)
    for key, value in env.items():
        if is_secret_name(key):
            said.notes.append(f"{key}: a secret; [env] lists it and it is read from your environment at launch")
            value = ""
        data.setdefault("env", {})[key] = value
    if dist:
        data["distribution"] = {**data.get("distribution", {}), **dist}

def _swift_env(env: dict[str, str], dist: dict[str, Any], said: Said) -> None:
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = env.pop("CUDA_VISIBLE_DEVICES")
        try:
            dist["gpu_ids"] = [int(x) for x in ids.split(",") if x.strip()]
        except ValueError:
            said.refused.append(f"CUDA_VISIBLE_DEVICES={ids}: only numeric GPU ids can be carried")
    for variable, key in (("NPROC_PER_NODE", "nproc_per_node"), ("NNODES", "num_machines"),
                          ("NODE_RANK", "machine_rank"), ("MASTER_PORT", "main_process_port")):
        if variable in env:
            value = env.pop(variable)
            if not value.isdigit():
                said.refused.append(f"{variable}={value}: a number is needed (shell variables are not expanded)")
            else:
                dist[key] = int(value)
    if "MASTER_ADDR" in env:
        dist["main_process_ip"] = env.pop("MASTER_ADDR")

def _torchrun(words: list[str], dist: dict[str, Any], said: Said) -> None:
    names = {"nproc_per_node": "nproc_per_node", "nproc-per-node": "nproc_per_node", "nnodes": "num_machines",
             "node_rank": "machine_rank", "node-rank": "machine_rank", "master_addr": "main_process_ip",
             "master-addr": "main_process_ip", "master_port": "main_process_port",
             "master-port": "main_process_port"}
    for flag, values in _launcher_pairs(words):
        key = names.get(flag)
        if flag.replace("-", "_") == "rdzv_endpoint" and values and ":" in values[0]:
            host, _, port = values[0].rpartition(":")
            dist["main_process_ip"] = host
            dist["main_process_port"] = _int(port, "torchrun --rdzv_endpoint", said.refused)
            continue
        if flag.replace("-", "_") == "rdzv_backend" and values and values[0] in ("static", "c10d"):
            dist["rdzv_backend"] = values[0]
            continue
        if key is None:
            if flag not in ("standalone",):
                said.refused.append(f"torchrun --{flag}: not carried (the workbench launches through accelerate)")
            continue
        value = values[0] if values else ""
        dist[key] = value if key == "main_process_ip" else _int(value, f"torchrun --{flag}", said.refused)

def _accelerate(words: list[str], dist: dict[str, Any], said: Said, base_dir: Path | None) -> None:
    pairs = dict(_launcher_pairs(words))
    config: dict[str, Any] = {}
    if "config_file" in pairs:
        path = Path(pairs.pop("config_file")[0]).expanduser()
        path = path if path.is_absolute() or base_dir is None else base_dir / path
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            said.refused.append(f"accelerate --config_file {path}: cannot read it here ({err})")
            return
    for flag, values in pairs.items():
        config[flag] = values[0] if values else True
    processes = int(config.pop("num_processes", 1) or 1)
    machines = int(config.pop("num_machines", 1) or 1)
    dist["num_machines"] = machines
    dist["nproc_per_node"] = max(1, processes // machines)
    for flag, key in (("machine_rank", "machine_rank"), ("main_process_port", "main_process_port")):
        if flag in config:
            dist[key] = int(config.pop(flag))
    if "main_process_ip" in config:
        dist["main_process_ip"] = str(config.pop("main_process_ip"))
    kind = str(config.pop("distributed_type", "")).upper()
    if config.pop("use_fsdp", False) or kind == "FSDP":
        dist["strategy"] = "fsdp"
        fsdp = config.pop("fsdp_config", {}) or {}
        dist["fsdp"] = _fsdp_section(fsdp, said.notes)
    elif processes > 1:
        dist["strategy"] = "ddp"
    if config.pop("use_cpu", False) or config.pop("cpu", False):
        dist["device"] = "cpu"
    gpu_ids = str(config.pop("gpu_ids", "all"))
    if gpu_ids != "all":
        if re.fullmatch(r"\d+(,\d+)*", gpu_ids):
            dist["gpu_ids"] = [int(x) for x in gpu_ids.split(",")]
        else:
            said.refused.append(f"accelerate gpu_ids {gpu_ids}: only numeric GPU ids can be carried")
    if config.get("rdzv_backend") in ("static", "c10d"):
        dist["rdzv_backend"] = config.pop("rdzv_backend")
    if config.get("mixed_precision") not in (None, "no"):
        said.notes.append(f"accelerate mixed_precision {config['mixed_precision']}: swift's --bf16/--fp16 decide "
                          "the Trainer's precision; set precision.bf16/fp16 if the script relied on accelerate's")
    handled = {"multi_gpu", "mixed_precision"}  # implied by the processes, said above
    dropped = sorted(f"{k} = {config[k]!r}" for k in config if k in AS_THE_WORKBENCH_WRITES and k not in handled
                     and config[k] not in AS_THE_WORKBENCH_WRITES[k])
    if dropped:
        said.notes.append(f"accelerate settings not carried (the workbench's accelerate config writes its own): "
                          f"{', '.join(dropped)}")
    left = sorted(k for k in config if k not in AS_THE_WORKBENCH_WRITES and k not in handled)
    if left:
        said.refused.append(f"accelerate settings not carried: {', '.join(left)}")


# accelerate config keys the workbench's own config sets (backend/launch/launcher_config.py) or leaves to
# accelerate: the values that change nothing; any other value is named as not carried
AS_THE_WORKBENCH_WRITES: dict[str, tuple[Any, ...]] = {
    "compute_environment": ("LOCAL_MACHINE",), "debug": (False,), "downcast_bf16": ("no", False),
    "enable_cpu_affinity": (False,), "main_training_function": ("main",), "same_network": (True,),
    "rdzv_backend": ("static",), "tpu_env": ([], None), "tpu_use_cluster": (False,), "tpu_use_sudo": (False,),
    "dynamo_config": ({}, None, {"dynamo_backend": "NO"}), "num_cpu_threads_per_process": (None,),
    "gpu_ids": ("all",), "use_cpu": (False,),
}


def _launcher_pairs(words: list[str]) -> list[tuple[str, list[str]]]:
    pairs: list[tuple[str, list[str]]] = []
    for word in words:
        if word.startswith("-") and not is_number(word):
            name, eq, value = word.lstrip("-").partition("=")
            pairs.append((name, [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(word)
    return pairs


def _fsdp_section(config: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    names = {"fsdp_version": "version", "fsdp_sharding_strategy": "sharding_strategy",
             "fsdp_offload_params": "cpu_offload", "fsdp_auto_wrap_policy": "auto_wrap_policy",
             "fsdp_transformer_layer_cls_to_wrap": "transformer_layer_cls_to_wrap",
             "fsdp_min_num_params": "min_num_params", "fsdp_activation_checkpointing": "activation_checkpointing",
             "fsdp_state_dict_type": "state_dict_type", "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
             "fsdp_sync_module_states": "sync_module_states", "fsdp_use_orig_params": "use_orig_params",
             "fsdp_forward_prefetch": "forward_prefetch", "fsdp_backward_prefetch": "backward_prefetch"}
    section = {}
    for key, value in config.items():
        if key in names:
            section[names[key]] = value
        else:
            notes.append(f"accelerate fsdp_config {key} not carried")
    if isinstance(section.get("sharding_strategy"), int):
        section["sharding_strategy"] = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"][
            section["sharding_strategy"] - 1]
    return section


def _int(value: str, where: str, refused: list[str]) -> int:
    if not value.isdigit():
        refused.append(f"{where} {value}: a number is needed (shell variables are not expanded)")
        return 1
    return int(value)
