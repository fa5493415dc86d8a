"""Launch the quickstart from the workspace (steps reduced in the form) and land on its monitor."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from run_fixtures import wait_for
from textual.widgets import Input

from backend.contract.events import read_all
from backend.core.shell_words import join
from backend.rundir.index import known_folders
from backend.rundir.layout import RunFolder, preview_dir
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.timing import limit_text, scaled
from tests.tui.conftest import QUICKSTART, command_shown, settle, squeezed
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmScreen
from tui.screens.monitor import MonitorScreen

MAX_STEPS = 12


@pytest.mark.slow
async def test_launch_quickstart_lands_on_monitor(isolated_runs: Path, tiny_model: Path) -> None:
    opened: list[Path] = []
    app = WorkbenchApp(QUICKSTART)  # the real hardware detection, as a user gets it
    original_open_run = app.open_run

    def open_run(run_dir: Path) -> None:
        opened.append(Path(run_dir))
        original_open_run(run_dir)

    app.open_run = open_run  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.show_field("training.max_steps")
        await pilot.pause()
        field = screen.form.editors["training.max_steps"].query_one(Input)
        field.focus()
        await pilot.press("end", *["backspace"] * len(field.value), *str(MAX_STEPS))
        await pilot.pause()
        assert screen.profile.training.max_steps == MAX_STEPS

        previewed = await command_shown(pilot, screen)  # the Command tab, as the user reads it before F5
        preview_folder = str(preview_dir(screen.profile.name))
        await pilot.press("f5")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert f"{MAX_STEPS} steps" in app.screen.body
        await pilot.press("enter")
        deadline = time.monotonic() + scaled(60)
        while not opened and time.monotonic() < deadline:
            await pilot.pause(0.2)
        assert opened, f"waited {limit_text(60)} for the launch to reach open_run"
        run = RunFolder(opened[0])
        try:
            assert run.path.parent == isolated_runs and run.path in known_folders()
            assert run.read_profile().training.max_steps == MAX_STEPS
            # what the supervisor runs (command.json's argv) is what the Command tab showed, the run's folder
            # in place of the preview's
            launched = json.loads(run.command_path.read_text(encoding="utf-8"))
            assert previewed.endswith(squeezed(join(launched["argv"])).replace(str(run.path), preview_folder))
            for key, value in launched["env"].items():
                assert squeezed(f"{key}={value}").replace(str(run.path), preview_folder) in previewed
            assert refresh(run).status in ("starting", "running", "finished")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the run's monitor")
            assert app.screen.feed.run.path == run.path  # the monitor of this run, not of another one
            # the run is real: it trains to the step count set in the form
            deadline = time.monotonic() + scaled(180)
            while refresh(run).is_active and time.monotonic() < deadline:
                await pilot.pause(0.5)
            state = refresh(run)
            assert state.status == "finished", (state, run.log_tail())
            end = [e for e in read_all(run.events_path) if e["type"] == "run_end"]
            assert end and end[-1]["step"] == MAX_STEPS
        finally:
            if refresh(run).is_active:
                stop_run(run)
