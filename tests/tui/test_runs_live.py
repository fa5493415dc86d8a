"""A real tiny run watched from the app: the step and loss advance on the monitor, a running run
cannot be deleted, and stopping it from the app (after the confirmation) leaves no process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from run_fixtures import REPO, long_quickstart, wait_for
from textual.widgets import DataTable

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.runs.start import start_run
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.screens.monitor import MonitorScreen
from tui.screens.runs import RunsScreen


def shown_step(monitor: MonitorScreen) -> int | None:
    found = re.search(r"step (\d+)/", str(monitor.query_one("#run-numbers").content))
    return int(found.group(1)) if found else None


def shows_a_logged_step_and_its_loss(monitor: MonitorScreen, events_path: Path) -> bool:
    """The step on screen and the loss beside it are one rank-0 log line of events.jsonl, read here."""
    step = shown_step(monitor)
    logged = {e["step"]: e for e in read_all(events_path) if e["type"] == "log" and e["rank"] == 0}
    loss = str(monitor.query_one("#loss-summary").content)
    return step in logged and f"train {logged[step]['loss']:.4g} @ {step}" in loss


@pytest.mark.slow
async def test_watch_a_live_run_then_stop_it_from_the_app(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = start_run(long_quickstart(), base_dir=REPO / "profiles")
    try:
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
            runs = pilot.app.screen
            assert isinstance(runs, RunsScreen)
            await wait_for(pilot, lambda: str(run.path) in runs.summaries, what="the run in the list")
            table = runs.query_one(DataTable)
            assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == str(run.path)

            await pilot.press("d")  # a running run is never deleted
            await pilot.pause()
            assert not isinstance(pilot.app.screen, ConfirmModal) and run.path.exists()
            assert any("stop it before deleting" in n.message for n in pilot.app._notifications)

            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, MonitorScreen), what="the monitor")
            monitor = pilot.app.screen
            store = monitor.feed.store

            def step() -> int:
                return (store.last_log.step or 0) if store.last_log else 0

            await wait_for(pilot, lambda: step() >= 2, timeout=300, what="the first logged steps")
            first_shown = shown_step(monitor)
            # the screen moves on to a step (and its loss) that the run itself wrote to events.jsonl
            await wait_for(pilot, lambda: (shown_step(monitor) or 0) > (first_shown or 0) + 3
                           and shows_a_logged_step_and_its_loss(monitor, run.events_path), timeout=120,
                           what="the screen to show a later step and its loss, as events.jsonl has them")
            assert str(monitor.query_one("#run-status").content) == "running"

            await pilot.press("x")
            assert isinstance(pilot.app.screen, ConfirmModal)
            await pilot.click("#choice-ok")
            # the stop worker returns once every process of the run is gone (SIGINT, SIGTERM, SIGKILL)
            await wait_for(pilot, lambda: any((n.title or "").startswith("Stopped") for n in pilot.app._notifications),
                           timeout=90, what="the stop to finish")
            state = refresh(run)
            assert state.status == "stopped"
            assert run_processes(run.path, (state.supervisor_pid, state.trainer_pid)) == []
            await wait_for(pilot, lambda: monitor.feed.state and monitor.feed.state.status == "stopped",
                           what="the monitor to see it")
    finally:
        if refresh(run).is_active:
            stop_run(run)
