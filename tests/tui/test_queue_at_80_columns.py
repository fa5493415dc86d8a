"""The Queue screen (F7) as rendered at 80x24 and 120x36 (#41): when each entry starts is never dropped, the
highlighted entry's reason is written out whole, and "loading…" (never "The queue is empty") until the queue
has been read."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.app import App

from backend.profile import LaunchProfile
from backend.queue.add import add_profiles
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp
from tui.screens.queue import QueueScreen


def screen_text(app: App[None]) -> str:
    return "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_the_queue_keeps_when_each_starts_and_says_why_in_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    first, second = add_profiles([(LaunchProfile(name="golden-first-of-two"), tmp_path),
                                  (LaunchProfile(name="golden-second-of-two"), tmp_path)])
    async with WorkbenchApp(None, start_mode="runs").run_test(size=size) as pilot:
        await pilot.press("f7")
        screen = pilot.app.screen
        assert isinstance(screen, QueueScreen)
        await wait_for(pilot, lambda: screen.loads > 0, what="the queue")
        await pilot.press("down")  # the second entry: it waits for the first
        await pilot.pause()
        text = screen_text(pilot.app)
        assert "starts (estimate)" in text, text
        assert "now" in text and "unknown" in text, text  # the STARTS column of both rows
        whole = " ".join(text.split())
        assert f"{second.id}: after golden-first-of-two ({first.id})" in whole, text


async def test_the_queue_says_loading_until_it_has_been_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    add_profiles([(LaunchProfile(name="waiting"), tmp_path)])
    release = threading.Event()
    import tui.screens.queue as queue_screen

    real = queue_screen.read_queue

    def slow_read():  # type: ignore[no-untyped-def]
        release.wait(30)
        return real()

    monkeypatch.setattr(queue_screen, "read_queue", slow_read)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(80, 24)) as pilot:
        await pilot.press("f7")
        screen = pilot.app.screen
        await pilot.pause()
        text = screen_text(pilot.app)
        assert "loading…" in text and "The queue is empty" not in text, text
        release.set()
        await wait_for(pilot, lambda: screen.loads > 0, what="the queue")
        await pilot.pause()
        assert "The queue is empty" not in screen_text(pilot.app) and "loading…" not in screen_text(pilot.app)
