"""F3's runs list draws at once and says "loading…" until its first read, never a false "No runs yet" (#41)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.app import App

from backend.rundir import index
from backend.runs.summaries import SummaryCache
from tests.tui.run_fixtures import fixture_run, wait_for
from tui.app import WorkbenchApp
from tui.screens.runs import RunsScreen


def screen_text(app: App[None]) -> str:
    return "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_the_runs_list_says_loading_until_its_first_read(tmp_path: Path, isolated_runs: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               size: tuple[int, int]) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    index.register(run.path)
    release = threading.Event()
    real = SummaryCache.reload

    def slow_reload(self):  # type: ignore[no-untyped-def]  # a loaded disk
        release.wait(30)
        return real(self)

    monkeypatch.setattr(SummaryCache, "reload", slow_reload)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=size) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        await pilot.pause()
        text = screen_text(pilot.app)
        assert "loading…" in text and "No runs yet" not in text, text
        release.set()
        await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
        await pilot.pause()
        text = screen_text(pilot.app)
        assert "loading…" not in text and "No runs yet" not in text and "quickstart-short" in text, text
