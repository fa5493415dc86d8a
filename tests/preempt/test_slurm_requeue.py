"""SLURM preemption through the exported script and the fake SLURM (#27): the script asks for
`--signal=B:USR1@120` and `--requeue`; SIGUSR1 to the batch step saves and stops the real training; the
job run again as SLURM requeues it (SLURM_RESTART_COUNT=1) resumes from that checkpoint and the step
count carries on."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.launch.nodes import free_port
from backend.launchers.slurm import SlurmOptions, export_slurm
from backend.profile import load_profile
from backend.rundir.process import signal_processes
from backend.runs.status import refresh
from tests.nodes.test_slurm_export import fake_slurm  # noqa: F401 (a fixture)
from tests.runs.helpers import log_events, quick_profile, wait_for

pytestmark = pytest.mark.slow


def _job(batch: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """What sbatch does on the first node: the script with SLURM's variables (its pid is the batch step)."""
    return subprocess.Popen(["bash", str(batch)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_preempted_job_saves_stops_and_resumes_when_requeued(tmp_path: Path, tiny_model: Path,
                                                             fake_slurm: dict[str, str]) -> None:  # noqa: F811
    profile = load_profile(quick_profile(tmp_path, training={"max_steps": 100_000, "save_steps": 100_000,
                                                             "logging_steps": 1, "num_train_epochs": 1000.0}))
    exported = export_slurm(profile, SlurmOptions(gpus_per_node=0, main_port=free_port(), python=sys.executable),
                            base_dir=tmp_path, workspace=tmp_path / "runs")
    run = exported.run
    text = exported.batch_script.read_text()
    assert "#SBATCH --signal=B:USR1@120" in text and "#SBATCH --requeue" in text
    assert run.read_profile().run.save_on_term is True
    env = {**fake_slurm, "SLURM_JOB_NODELIST": "127.0.0.1", "SLURM_JOB_NUM_NODES": "1"}
    job = _job(exported.batch_script, env)
    try:
        wait_for(lambda: any(e["step"] >= 3 for e in log_events(run)), timeout=300, what="step 3")
        job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@120 does
        assert job.wait(120) == 0
        state = refresh(run)
        assert (state.status, state.failure_reason) == ("stopped", "saved and stopped on SIGUSR1"), run.log_tail(3000)
        saved = [e for e in read_all(run.events_path) if e["type"] == "checkpoint" and e["rank"] == 0]
        assert len(saved) == 1 and saved[0]["requested"] == "SIGUSR1"
        step = saved[0]["step"]

        job = _job(exported.batch_script, {**env, "SLURM_RESTART_COUNT": "1"})  # SLURM requeued it
        begins = wait_for(lambda: [e for e in read_all(run.events_path) if e["type"] == "run_begin"][1:],
                          timeout=300, what="the requeued job's start")
        assert begins[0]["start_step"] == step
        wait_for(lambda: any(e["step"] > step for e in log_events(run)), timeout=120, what="a step after the requeue")
        state = run.read_state()
        assert (state.attempt, state.resumed_from) == (2, str(run.output_dir / f"checkpoint-{step}"))
        assert "resuming from" in run.log_path.read_text()
        job.send_signal(signal.SIGUSR1)
        assert job.wait(120) == 0
        assert refresh(run).status == "stopped"
    finally:
        if job.poll() is None:
            job.kill()
        signal_processes(run_processes(run.path), signal.SIGKILL)
