"""`workbench export torchrun`: the same training started by plain torchrun instead of accelerate launch.

torchrun does not read accelerate's config file, so what accelerate would take from it goes
elsewhere: the process layout and the rendezvous become torchrun flags; FSDP becomes swift's
own `--fsdp FILE` (a JSON in the shape of swift's `config/fsdp2.json`: an `fsdp` option string
and the Trainer's `fsdp_config`); DeepSpeed stays swift's `--deepspeed FILE`, and mixed
precision stays swift's --bf16/--fp16.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.fs import write_text_atomic
from backend.core.shell_words import ShellVar, Token, export_lines, render_command
from backend.hardware.machine import HardwareInfo
from backend.launch.command import build_launch
from backend.launch.launcher_config import fsdp_settings
from backend.profile import LaunchProfile

FSDP_CONFIG_NAME = "fsdp_config.json"


@dataclass
class TorchrunExport:
    script: str
    run_dir: Path
    argv: list[Token]
    fsdp_config: dict[str, Any] | None = None


def swift_fsdp_config(profile: LaunchProfile, model_dir: str | None) -> dict[str, Any]:
    """FSDP settings for swift's `--fsdp FILE` (read by swift, then by the HF Trainer): launcher_config's
    `fsdp_settings` in the Trainer's names and forms."""
    f = profile.distribution.fsdp
    if f.version == 2 and f.sharding_strategy not in ("FULL_SHARD", "SHARD_GRAD_OP"):
        raise ValueError(f"distribution.fsdp: FSDP2 has no {f.sharding_strategy}; the Trainer accepts FULL_SHARD or "
                         "SHARD_GRAD_OP with version 2 (set version = 1 for the other strategies)")
    settings = fsdp_settings(profile, model_dir)
    # swift reads `fsdp_version` before the Trainer strips the `fsdp_` prefix; the Trainer calls offloading
    # cpu_offload, takes FSDP1's strategy lower-cased as reshard_after_forward and a list of classes to wrap
    renames = {"version": "fsdp_version", "offload_params": "cpu_offload", "sharding_strategy": "reshard_after_forward"}
    config = {renames.get(key, key): value for key, value in settings.items()}
    if "sharding_strategy" in settings:
        config["reshard_after_forward"] = settings["sharding_strategy"].lower()
    if "transformer_layer_cls_to_wrap" in settings:
        config["transformer_layer_cls_to_wrap"] = [settings["transformer_layer_cls_to_wrap"]]
    options = [f.sharding_strategy.lower(), "auto_wrap"] + (["offload"] if f.cpu_offload else [])
    return {"fsdp": " ".join(options), "fsdp_config": config}


def torchrun_args(profile: LaunchProfile) -> list[Token]:
    d = profile.distribution
    if d.num_machines == 1:
        return ["--standalone", f"--nproc_per_node={d.nproc_per_node}"]
    args: list[Token] = [f"--nnodes={d.num_machines}", f"--nproc_per_node={d.nproc_per_node}"]
    if d.rdzv_backend == "c10d":  # ranks are assigned by the rendezvous
        rdzv_id = re.sub(r"[^A-Za-z0-9_-]+", "-", profile.name)
        return [*args, "--rdzv_backend=c10d", f"--rdzv_endpoint={d.main_process_ip}:{d.main_process_port}",
                f"--rdzv_id={rdzv_id}"]
    return [*args, "--node_rank", ShellVar("NODE_RANK"), f"--master_addr={d.main_process_ip}",
            f"--master_port={d.main_process_port}"]


def export_torchrun(
    profile: LaunchProfile,
    run_dir: Path,
    hardware: HardwareInfo,
    *,
    base_dir: Path | None = None,
    python: str = sys.executable,
) -> TorchrunExport:
    """Write the config files into `run_dir` and return the script that runs torchrun."""
    plan = build_launch(profile, run_dir, hardware, base_dir=base_dir, python=python)
    plan.write_configs()  # the DeepSpeed JSON, when there is one (the accelerate YAML is unused)
    swift_args = plan.argv[plan.argv.index("swift.cli.sft") + 1:]
    fsdp = None
    cpu = "--use_cpu" in swift_args
    if profile.distribution.strategy == "fsdp" and not cpu:
        fsdp = swift_fsdp_config(profile, swift_args[swift_args.index("--model") + 1])
        fsdp_path = Path(plan.cwd) / FSDP_CONFIG_NAME
        write_text_atomic(fsdp_path, json.dumps(fsdp, indent=2))
        swift_args = [*swift_args, "--fsdp", str(fsdp_path)]
    argv: list[Token] = [python, "-m", "torch.distributed.run", *torchrun_args(profile), "-m", "swift.cli.sft",
                         *swift_args]
    return TorchrunExport(script=_script(profile, plan.env, plan.cwd, argv), run_dir=Path(plan.cwd), argv=argv,
                          fsdp_config=fsdp)


def _script(profile: LaunchProfile, env: dict[str, str], cwd: str, argv: list[Token]) -> str:
    d = profile.distribution
    if d.num_machines > 1 and d.rdzv_backend == "static":
        usage = (f"# Run on every machine: NODE_RANK=K bash THIS_FILE (K from 0 to {d.num_machines - 1}; "
                 f"0 on the machine at {d.main_process_ip}).\n")
        rank_line = 'NODE_RANK="${NODE_RANK:?set NODE_RANK to the rank of this machine}"\n'
    elif d.num_machines > 1:
        usage = f"# Run on every machine: bash THIS_FILE (the c10d rendezvous at {d.main_process_ip} assigns ranks).\n"
        rank_line = ""
    else:
        usage = "# Run: bash THIS_FILE\n"
        rank_line = ""
    command = render_command(argv, break_after="swift.cli.sft", tail='"$@"')
    return f"""#!/bin/bash
# Profile "{profile.name}" under plain torchrun: {d.num_machines} machine(s) x {d.nproc_per_node} process(es).
{usage}# Exported by `workbench export torchrun`; arguments are passed on to swift. Events go to {cwd}.
set -euo pipefail
{rank_line}{export_lines(env)}
cd {shlex.quote(cwd)}
exec {command}
"""
