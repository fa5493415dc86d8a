"""The SLURM batch job's supervisor is the one supervisor, proven the run's like any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from backend.core.process_identity import run_marker
from backend.runs.status import refresh
from tests.faults import helpers as h
from tests.nodes.test_slurm_export import _gpu_export, fake_slurm  # noqa: F401 (a fixture)

# the compute nodes' Python: the supervisor step runs for real, each node's launcher waits for a file
WAITING_PYTHON = r"""#!/bin/bash
if [[ $1 == -m && $2 == backend.cli.supervise && $3 == slurm ]]; then exec REAL_PYTHON "$@"; fi
while [[ ! -e "$WORKBENCH_RUN_DIR/go" ]]; do sleep 0.1; done
"""


def test_the_batch_jobs_supervisor_carries_the_runs_marker_and_is_kept_running(
        tmp_path: Path, tiny_model: Path, fake_slurm: dict[str, str]) -> None:  # noqa: F811
    python = tmp_path / "waiting-python"
    python.write_text(WAITING_PYTHON.replace("REAL_PYTHON", sys.executable))
    python.chmod(0o755)
    exported = _gpu_export(tmp_path, str(python))
    run = exported.run
    job = subprocess.Popen(["bash", str(exported.batch_script)], env=fake_slurm, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        state = h.wait_until(lambda: (s := run.read_state()).trainer_pid and s, timeout=120, what="the srun step")
        supervisor = psutil.Process(state.supervisor_pid)
        assert supervisor.environ().get("WORKBENCH_RUN_DIR") == str(run.path)
        assert not state.keeper_gone(run_marker(run.path))
        assert refresh(run).status == "running"
    finally:
        (run.path / "go").touch()
        job.wait(120)
    final = refresh(run)  # recorded by the supervisor itself: the fake nodes logged no step
    assert (final.status, final.exit_code, final.failure_reason) == (
        "failed", 0, "trained nothing: 0 steps (no training step was logged)")
