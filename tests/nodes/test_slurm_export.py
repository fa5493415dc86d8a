"""The SLURM export: the batch script's logic run under a fake `srun`/`scontrol` and SLURM_* variables
(the script, not SLURM), the run folder it keeps current, and shellcheck."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from typer.testing import CliRunner

from backend.cli import full_app
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.launch.nodes import free_port
from backend.launchers.slurm import (
    SlurmOptions,
    allocation_hardware,
    cluster_problems,
    export_slurm,
    gpus_per_node,
    job_profile,
)
from backend.profile import load_profile
from backend.runs.errors import LaunchRefused
from backend.runs.status import refresh
from tests.nodes.nodes_helpers import SHELLCHECK_MISSING, losses, shellcheck_binary, two_machine_profile
from tests.timing import scaled

FAKE_SRUN = r"""#!/bin/bash
# fake srun: log the options, start the command once per node (in parallel) with SLURM_NODEID set
nodes=1
while [[ $# -gt 0 && $1 == --* ]]; do
  [[ $1 == --nodes=* ]] && nodes=${1#--nodes=}
  echo "$1" >>"$FAKE_SLURM_LOG"
  shift
done
pids=()
for ((i = 0; i < nodes; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit "$rc"
"""
FAKE_SCONTROL = r"""#!/bin/bash
# fake scontrol: `scontrol show hostnames a,b` prints one host a line
[[ $1 == show && $2 == hostnames ]] || exit 1
tr ',' '\n' <<<"$3"
"""
# stands for the compute nodes' Python: the supervisor step runs for real, each node's launcher is recorded
FAKE_PYTHON = r"""#!/bin/bash
if [[ $1 == -m && $2 == backend.cli.supervise && $3 == slurm ]]; then exec REAL_PYTHON "$@"; fi
RECORD="$WORKBENCH_RUN_DIR/node-$SLURM_NODEID.json" REAL_PYTHON -c '
import json, os, sys
keys = ("MAIN_ADDR", "MAIN_PORT", "WORKBENCH_RUN_DIR", "CUDA_VISIBLE_DEVICES")
record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in keys}}
json.dump(record, open(os.environ["RECORD"], "w"))
' "$@"
# rank 0 writes what the workbench callback writes for a run that trained (a "finished" run that
# logged no step is failed: #14)
[[ $SLURM_NODEID == 0 ]] && printf '%s\n' '{"v":1,"type":"run_begin","time":0,"rank":0}' \
    '{"v":1,"type":"log","step":1,"loss":1.0,"time":0,"rank":0}' \
    '{"v":1,"type":"run_end","step":1,"status":"finished","time":0,"rank":0}' >> "$WORKBENCH_RUN_DIR/events.jsonl"
exit_var="FAKE_EXIT_$SLURM_NODEID"
exit "${!exit_var:-0}"
"""

app = full_app()


@pytest.fixture
def fake_slurm(tmp_path: Path) -> dict[str, str]:
    """PATH with fake srun/scontrol, and the variables sbatch would set for a two-node job."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "gpu-a17,gpu-a18", "SLURM_JOB_NUM_NODES": "2",
            "FAKE_SLURM_LOG": str(tmp_path / "srun-options.txt")}


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_PYTHON.replace("REAL_PYTHON", sys.executable))
    path.chmod(0o755)
    return str(path)


def _gpu_export(tmp_path: Path, python: str, **options: object):
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    settings = {"nodes": 2, "gpus_per_node": 8, "time": "01:30:00", "partition": "gpu", "account": "proj-42",
                "cpus_per_task": 16, "python": python, **options}
    return export_slurm(profile, SlurmOptions(**settings), base_dir=SHIPPED_PROFILES_DIR, workspace=tmp_path / "runs")


def _submit(batch: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """What sbatch does on the first node of the allocation: run the script with SLURM's variables."""
    return subprocess.run(["bash", str(batch)], env=env, capture_output=True, text=True, timeout=scaled(timeout),
                          stdin=subprocess.DEVNULL)


def test_batch_script_asks_for_the_allocation(tmp_path: Path, tiny_model: Path, fake_python: str) -> None:
    exported = _gpu_export(tmp_path, fake_python)
    text = exported.batch_script.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=16", "#SBATCH --time=01:30:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj-42", f"#SBATCH --output={exported.run.path}/slurm-%j.out"):
        assert line in text.splitlines(), line
    assert 'MAIN_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"' in text
    config = load_config_from_file(str(exported.run.path / "accelerate_config.yaml"))
    assert (config.num_machines, config.num_processes, config.distributed_type.value) == (2, 16, "MULTI_GPU")
    assert exported.run.read_state().status == "starting"  # queued: nothing runs until sbatch starts it
    assert "--use_cpu" not in exported.node_script.read_text()  # GPU nodes, whatever this machine has


def test_job_runs_one_launcher_per_node(tmp_path: Path, tiny_model: Path, fake_python: str,
                                        fake_slurm: dict[str, str]) -> None:
    exported = _gpu_export(tmp_path, fake_python)
    result = _submit(exported.batch_script, fake_slurm)
    assert result.returncode == 0, result.stderr
    run = exported.run
    state = refresh(run)
    assert (state.status, state.exit_code, state.host) == ("finished", 0, socket.gethostname())
    job = json.loads((run.path / "slurm_job.json").read_text())
    assert (job["SLURM_JOB_ID"], job["main_addr"], job["main_port"]) == ("4242", "gpu-a17", "29500")
    for rank in (0, 1):
        record = json.loads((run.path / f"node-{rank}.json").read_text())
        argv = record["argv"]
        value = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("--")}
        assert argv[:2] == ["-m", "accelerate.commands.launch"] and "swift.cli.sft" in argv
        assert value["--machine_rank"] == str(rank)  # from SLURM_NODEID
        assert (value["--main_process_ip"], value["--main_process_port"]) == ("gpu-a17", "29500")
        assert value["--config_file"] == str(run.path / "accelerate_config.yaml")
        assert record["env"]["WORKBENCH_RUN_DIR"] == str(run.path) and record["cwd"] == str(run.path)
        assert record["env"]["CUDA_VISIBLE_DEVICES"] is None  # SLURM hands each node its GPUs
    srun_options = (tmp_path / "srun-options.txt").read_text().split()
    assert {"--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=16"} <= set(srun_options)
    assert "===== workbench: SLURM job 4242 on gpu-a17,gpu-a18, main gpu-a17:29500" in run.log_path.read_text()
    again = _submit(exported.batch_script, fake_slurm)  # a finished run is never started over in place
    assert again.returncode == 2 and "already finished" in run.log_path.read_text()


def test_a_failing_node_fails_the_run(tmp_path: Path, tiny_model: Path, fake_python: str,
                                      fake_slurm: dict[str, str]) -> None:
    exported = _gpu_export(tmp_path, fake_python)
    result = _submit(exported.batch_script, {**fake_slurm, "FAKE_EXIT_1": "3"})
    state = refresh(exported.run)
    assert result.returncode == 0  # the supervisor ran and recorded the end; the state says how
    assert (state.status, state.exit_code) == ("failed", 3)


def test_outside_slurm_the_script_says_how_to_submit(tmp_path: Path, tiny_model: Path, fake_python: str) -> None:
    exported = _gpu_export(tmp_path, fake_python)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = _submit(exported.batch_script, env)
    assert result.returncode != 0 and "submit this script with sbatch" in result.stderr
    assert exported.run.read_state().status == "starting"


@pytest.mark.skipif(shellcheck_binary() is None, reason=SHELLCHECK_MISSING)
@pytest.mark.parametrize("gpus", [8, 0])
def test_scripts_are_shellcheck_clean(tmp_path: Path, tiny_model: Path, gpus: int) -> None:
    exported = _gpu_export(tmp_path, sys.executable, gpus_per_node=gpus, partition=None, account=None)
    result = subprocess.run([shellcheck_binary(), "--severity=style", str(exported.batch_script),
                             str(exported.node_script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_bad_options_and_profiles_are_refused(tmp_path: Path, tiny_model: Path, isolated_runs: Path) -> None:
    runner = CliRunner()
    bad_time = runner.invoke(app, ["export", "slurm", "quickstart", "--time", "10h"])
    assert bad_time.exit_code == 2 and "--time '10h' is not a SLURM time" in bad_time.output
    taken = tmp_path / "job.sbatch"
    taken.write_text("keep me")
    exists = runner.invoke(app, ["export", "slurm", "quickstart", "-o", str(taken)])
    assert exists.exit_code == 2 and "exists" in exists.output and taken.read_text() == "keep me"
    assert not isolated_runs.exists()  # refused before any run folder was made
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.precision.fp16 = profile.precision.bf16 = True
    with pytest.raises(LaunchRefused, match="fp16 and bf16"):
        export_slurm(profile, SlurmOptions(gpus_per_node=1), workspace=tmp_path / "runs")


def test_cli_writes_the_script_where_asked(tmp_path: Path, tiny_model: Path, isolated_runs: Path) -> None:
    target = tmp_path / "train.sbatch"
    result = CliRunner().invoke(app, ["export", "slurm", "quickstart", "-o", str(target), "--nodes", "3",
                                      "--gpus-per-node", "4", "--time", "2-00:00:00", "--port", "29777"])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert "#SBATCH --nodes=3" in text and "#SBATCH --time=2-00:00:00" in text and "MAIN_PORT=29777" in text
    assert f"submit: sbatch {target}" in result.output
    assert "#SBATCH --partition" not in text  # the cluster's default


@pytest.mark.slow
def test_real_two_node_job_through_the_script(tmp_path: Path, tiny_model: Path, fake_slurm: dict[str, str]) -> None:
    """The whole path: sbatch script -> supervisor -> srun -> two real CPU launchers on loopback."""
    profile = load_profile(two_machine_profile(tmp_path, port=free_port()))
    exported = export_slurm(profile, SlurmOptions(gpus_per_node=0, main_port=free_port()),
                            base_dir=tmp_path, workspace=tmp_path / "runs")
    result = _submit(exported.batch_script, {**fake_slurm, "SLURM_JOB_NODELIST": "127.0.0.1,127.0.0.1"}, timeout=300)
    run = exported.run
    assert result.returncode == 0 and refresh(run).status == "finished", run.log_tail(3000)
    rank0, rank1 = losses(run.events_path, 0), losses(run.events_path, 1)
    assert len(rank0) == 6 and rank0 == rank1
    assert run.checkpoints()  # the shared run folder holds the checkpoint, written once by rank 0


def test_gpu_model_checks_become_warnings_for_the_cluster() -> None:
    """bf16 readiness depends on the compute nodes' GPUs, which this machine cannot ask."""
    profile = load_profile(SHIPPED_PROFILES_DIR / "qwen2-1.5b-fsdp-qlora-2gpu.toml")
    options = SlurmOptions(nodes=2)
    problems = cluster_problems(job_profile(profile, options), allocation_hardware(gpus_per_node(profile, options)),
                                SHIPPED_PROFILES_DIR)
    (bf16,) = [p for p in problems if p.field == "precision.bf16"]
    assert bf16.severity == "warning" and "cannot be checked from here" in bf16.message
    assert not [p for p in problems if p.severity == "error"]
