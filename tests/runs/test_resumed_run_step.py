"""A resumed run shows the step its new attempt reached, not the step its last attempt stopped at (#34 item 13):
`workbench runs` and `workbench status RUN` on a hand-made run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_the_resumed_attempt_s_step_is_shown_not_the_old_stop_step(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running", state={"attempt": 2})
    logs = [{"type": "log", "step": s, "max_steps": 60, "loss": 2.0 - s / 100} for s in range(1, 10)]
    stop = {"type": "run_end", "step": 9, "max_steps": 60, "status": "stopped", "reason": "saved and stopped on SIGUSR1"}
    resumed = [{"type": "run_begin", "start_step": 9}] + \
        [{"type": "log", "step": s, "max_steps": 60, "loss": 1.5 - s / 100} for s in range(10, 42)]
    h.write_events(run, *logs, stop, *resumed)

    listed = h.cli("runs")
    shown = h.cli("status", run.run_id)

    h.assert_clean_exit(listed, (0,))
    row = next(line for line in listed.output.splitlines() if line.split()[:1] == [run.run_id])
    assert row.split()[2:5] == ["running", "41/60", "1.0900"]
    h.assert_clean_exit(shown, (0,))
    assert "  step 41/60  loss 1.0900" in shown.output
