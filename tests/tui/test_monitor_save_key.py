"""The monitor's `w` (save now, #27): on a running run it writes the save request and reports the checkpoint
once the trainer's event says it was saved; on a run that is not running it says so and asks nothing. The
trainer's side is a real run's in tests/preempt/test_save_and_signal.py; here the test plays the trainer."""

from __future__ import annotations

import json
import time
from pathlib import Path

from run_fixtures import FIXED_NOW, FixedSystem, fixture_run, open_monitor, wait_for

from backend.contract.save_request import read_save_request, take_save_request
from tests.faults import helpers as h
from tui.app import WorkbenchApp


async def test_w_on_a_finished_run_says_only_a_running_run_can_save(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        await pilot.press("w")
        await pilot.pause()
        assert [n.message for n in pilot.app._notifications] == [
            "the run is finished; only a running run can save now"]
    assert read_save_request(run.path) is None


async def test_w_on_a_running_run_asks_the_trainer_and_reports_the_checkpoint(tmp_path: Path,
                                                                              isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    supervisor = h.sleeper(marker=run.path)
    try:
        run.update_state(status="running", ended_at=None, supervisor_pid=supervisor.pid,
                         supervisor_started=h.started(supervisor.pid))
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
            await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
            await pilot.press("w")
            await wait_for(pilot, lambda: read_save_request(run.path) is not None, what="the save request")
            request = take_save_request(run.path)  # the trainer takes it at its step end, saves, says so
            assert request is not None and (request.action, request.reason) == ("save", "save now")
            path = str(run.path / "output" / "checkpoint-41")
            with open(run.events_path, "a", encoding="utf-8") as events:
                events.write(json.dumps({"v": 1, "type": "checkpoint", "time": time.time(), "rank": 0, "step": 41,
                                         "path": path, "requested": "save now"}) + "\n")
            await wait_for(pilot, lambda: any(n.title == "Checkpoint saved" for n in pilot.app._notifications),
                           what="the report")
            told = next(n.message for n in pilot.app._notifications if n.title == "Checkpoint saved")
            assert told == f"saved {path} at step 41 (save now)"
    finally:
        supervisor.kill()
