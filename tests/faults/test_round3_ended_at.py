"""Never lie about when a run ended: a run concluded from evidence (its supervisor died) ended when its
events say, not when someone looked. A 1-minute run looked at 50 minutes later showed "elapsed 50m30s"."""

from __future__ import annotations

import time
from pathlib import Path

from backend.rundir.layout import RunFolder
from backend.runs.status import refresh
from backend.runs.summaries import summarize
from tests.faults import helpers as h

BEGAN = time.time() - 50 * 60  # the run trained 50 minutes ago, for one minute


def _lost(workspace: Path) -> RunFolder:
    return h.fake_run(workspace, status="running", state={
        "started_at": BEGAN, "supervisor_pid": 4_000_000, "supervisor_started": 1.0})


def test_a_run_concluded_from_its_run_end_ended_at_that_event(workspace: Path) -> None:
    run = _lost(workspace)
    h.write_events(run, {"type": "run_begin", "time": BEGAN + 1}, {"type": "log", "step": 10, "loss": 0.5,
                   "time": BEGAN + 55}, {"type": "run_end", "step": 10, "status": "finished", "time": BEGAN + 60})
    h.complete_checkpoint(run.path / "output" / "checkpoint-10", 10)
    state = refresh(run)
    assert state.status == "finished"
    assert state.ended_at == BEGAN + 60
    assert summarize(run).elapsed_seconds == 60
    assert run.read_state().ended_at == BEGAN + 60  # as recorded, not only as shown


def test_a_run_lost_without_a_run_end_ended_at_its_last_event_said_so(workspace: Path) -> None:
    run = _lost(workspace)
    h.write_events(run, {"type": "run_begin", "time": BEGAN + 1}, {"type": "log", "step": 4, "loss": 1.0,
                                                                    "time": BEGAN + 40})
    state = refresh(run)
    assert state.status == "unknown"
    assert state.ended_at == BEGAN + 40
    assert summarize(run).elapsed_seconds == 40
    assert state.failure_reason.endswith("; its end is taken as its last event's time (it ended then or later)")
