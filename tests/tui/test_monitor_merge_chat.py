"""From a finished run's monitor: merge the LoRA (a real `swift export` job) and open the chat."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_fixtures import REPO, wait_for

from backend.jobs.merge import read_merged_model
from backend.profile import load_profile
from backend.runs.manager import refresh, start_run
from tests.runs.helpers import wait_for as wait_until
from tui.app import WorkbenchApp
from tui.screens.chat import ChatScreen
from tui.screens.monitor import MonitorScreen
from tui.modals.dialogs import ConfirmModal


@pytest.mark.slow
async def test_merge_then_chat_from_the_monitor(tiny_model: Path, isolated_runs: Path) -> None:
    profile = load_profile(REPO / "profiles" / "quickstart.toml")
    profile.training.max_steps = 10
    run = start_run(profile, base_dir=REPO / "profiles")
    wait_until(lambda: refresh(run).status == "finished", timeout=240, what="the short run")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        pilot.app.open_run(run.path)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, MonitorScreen), what="the monitor")
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal), what="the merge question")
        await pilot.press("y")
        merged = run.path / "merged" / "checkpoint-10-merged"
        await wait_for(pilot, lambda: any(n.title == "Merged" for n in pilot.app._notifications), timeout=240,
                       what="the merge to finish")
        model = read_merged_model(merged)
        assert model is not None and (merged / "config.json").is_file()
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen), what="the chat screen")
