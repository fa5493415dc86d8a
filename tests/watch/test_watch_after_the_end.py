"""`workbench watch --until finished` opened after the run ended still says how it ended."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from backend.contract.alerts import Alert, append_alert
from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_watch_of_a_run_that_already_ended_prints_its_final_alert(workspace: Path) -> None:
    started = time.time() - 60
    run = h.fake_run(workspace, status="failed", state={"started_at": started, "ended_at": started + 50,
                                                        "failure_reason": "killed by SIGKILL"})
    append_alert(run.path, Alert("stopped", "stopped on request", 3, time=started - 100, run_id=run.run_id))  # before a resume
    append_alert(run.path, Alert("failed", "killed by SIGKILL", 8, time=started + 50, run_id=run.run_id))
    (run.path / "watch").mkdir()
    (run.path / "watch" / "status.json").write_text(json.dumps({"alive": False}))
    result = h.cli("watch", run.run_id, "--until", "finished")
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"{run.run_id} failed at step 8: killed by SIGKILL",
                                          f"run {run.run_id} failed: killed by SIGKILL"]
