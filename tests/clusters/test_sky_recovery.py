"""A SkyPilot recovery, for real on this machine (#40 item 2): the exported task's own `run` script (bash, HOME and
the bucket mount stood in for by folders here, its venv's python by this one) trains the tiny model through the
workbench's supervisor; the "instance" is then lost (every process of the run killed, SIGKILL: no save, no
final state), and the same `run` started again, as SkyPilot's managed job does on a new instance, resumes
the run in place from its newest complete checkpoint: the step count carries on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.launchers.skypilot import RUNS_MOUNT, SkyOptions, export_skypilot
from backend.profile import load_profile
from backend.rundir.layout import RunFolder
from backend.rundir.process import signal_processes
from tests.runs.helpers import log_events, quick_profile, wait_for

pytestmark = pytest.mark.slow
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _node(script: str, home: Path, bucket: Path) -> subprocess.Popen[bytes]:
    """What SkyPilot does on node 0: `run` in the synced workdir, with the task's envs and its own."""
    env = {**os.environ, "HOME": str(home), "WORKBENCH_WORKSPACE": str(bucket), "SKYPILOT_NODE_RANK": "0",
           "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_TASK_ID": "sky-managed-7_quickstart"}
    return subprocess.Popen(["bash", "-c", script], cwd=SOURCE_ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_a_lost_instance_is_recovered_and_the_run_resumes_its_step(tmp_path: Path, tiny_model: Path,
                                                                   isolated_runs: Path) -> None:
    profile = load_profile(quick_profile(tmp_path, distribution={"device": "cpu"},
                                         training={"max_steps": 100_000, "save_steps": 3, "logging_steps": 1,
                                                   "num_train_epochs": 1000.0}))
    exported = export_skypilot(profile, SkyOptions(bucket="team-runs"), base_dir=tmp_path)
    task = yaml.safe_load(exported.text)
    assert task["envs"]["WORKBENCH_WORKSPACE"] == RUNS_MOUNT and task["resources"]["cpus"] == "4+"
    home, bucket = tmp_path / "home", tmp_path / "bucket"
    (home / "workbench-venv" / "bin").mkdir(parents=True)
    python = home / "workbench-venv" / "bin" / "python"
    python.write_text(f'#!/bin/bash\nexec {sys.executable} "$@"\n')  # the venv that `setup` makes there
    python.chmod(0o755)
    run = RunFolder(bucket / exported.run_id)
    node = _node(task["run"], home, bucket)
    try:
        saved = wait_for(lambda: [e for e in read_all(run.events_path) if e["type"] == "checkpoint"
                                  and e["rank"] == 0 and e["step"] >= 3], timeout=300, what="checkpoint-3")
        wait_for(lambda: run.complete_checkpoints(), timeout=60, what="a complete checkpoint")
        signal_processes(run_processes(run.path), signal.SIGKILL)  # the instance is gone: nothing saves
        node.wait(60)
        step = max(int(p.name.split("-")[1]) for p in run.complete_checkpoints())
        assert step >= saved[0]["step"]

        node = _node(task["run"], home, bucket)  # SkyPilot's recovery: the same task on a new instance
        begins = wait_for(lambda: [e for e in read_all(run.events_path) if e["type"] == "run_begin"][1:],
                          timeout=300, what="the recovered job's start")
        assert begins[0]["start_step"] == step
        wait_for(lambda: any(e["step"] > step for e in log_events(run)), timeout=120, what="a step after recovery")
        state = run.read_state()
        assert (state.attempt, state.resumed_from) == (2, str(run.output_dir / f"checkpoint-{step}"))
        assert "===== workbench: SkyPilot recovered the job on another instance (sky-managed-7_quickstart) =====" \
            in run.log_path.read_text()
    finally:
        signal_processes(run_processes(run.path), signal.SIGKILL)
        if node.poll() is None:
            node.kill()
