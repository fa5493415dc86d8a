"""The monitor of a run from elsewhere says how old what it shows is (#40 item 3): a synced copy of a run's folder
(sync.json, as `workbench sync` writes it) is read as a local run, and the header says the age of its newest
event and of the copy. A run of this machine says nothing more."""

from __future__ import annotations

import json
from pathlib import Path

from run_fixtures import fixture_run, open_monitor

from tui.app import WorkbenchApp
from tui.screens.monitor import KEEP_GOING

LAST_EVENT = 1795951489.1494856  # the fixture's run_end


async def test_a_synced_run_s_monitor_says_the_age_of_what_it_shows(isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    now = LAST_EVENT + 40.0
    (run.path / "sync.json").write_text(json.dumps({"source": "/bucket/quickstart-short", "synced_at": now - 3}))
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, clock=lambda: now, poll_interval=0.2)
        assert monitor.sub_title == (f"{KEEP_GOING} · seen: events as of 40 s ago; synced 3 s ago from "
                                     "/bucket/quickstart-short (`workbench sync` copies it again)")


async def test_a_local_run_s_monitor_says_nothing_more(isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, clock=lambda: LAST_EVENT + 40.0, poll_interval=0.2)
        assert monitor.sub_title == KEEP_GOING
