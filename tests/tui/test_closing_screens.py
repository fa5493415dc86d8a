"""Closing a screen lets it go: the chat's model worker is stopped without the UI waiting on it, and a
screen whose worker failed is not kept alive by the app's list of failures once it is closed."""

from __future__ import annotations

import gc
import sys
import time
import weakref
from pathlib import Path

import pytest
from run_fixtures import fixture_run, wait_for

from backend.chat.client import ChatClient
from backend.checkpoints.targets import ModelTarget
from tests.jobs.jobs_helpers import wait_gone
from tui.app import WorkbenchApp
from tui.screens.chat import ChatScreen
from tui.screens.compare import CompareScreen

# a model worker that never loads and shrugs off SIGTERM: only SIGKILL ends it
STUBBORN = "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); sys.stdin.read(); signal.pause()"


async def test_closing_a_chat_does_not_wait_for_its_worker(isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChatClient, "worker_argv", lambda self: [sys.executable, "-c", STUBBORN])
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 30)) as pilot:
        runs = app.screen
        chat = ChatScreen(ModelTarget("stand-in", label="stand-in"))
        await app.push_screen(chat)
        pane = chat.panes()[0]
        await wait_for(pilot, lambda: pane.client.pid is not None, what="the model worker to start")
        pid = pane.client.pid
        started = time.monotonic()
        await pilot.press("escape")  # nothing being answered: esc closes the chat
        await wait_for(pilot, lambda: app.screen is runs, what="the chat to close")
        assert time.monotonic() - started < 2.5  # the UI did not wait the 3 s (SIGTERM ignored) + the SIGKILL
    assert wait_gone([pid], timeout=10) == []  # stopped all the same (SIGTERM, then SIGKILL)


async def test_a_closed_screen_whose_worker_failed_is_not_kept_alive(isolated_runs: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("the events cannot be read")

    monkeypatch.setattr("tui.screens.compare.load_run_store", boom)
    runs = [fixture_run(isolated_runs, name).path for name in ("quickstart-short", "cpu-fp16-overflow")]
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 30)) as pilot:
        compare = CompareScreen(runs)
        await app.push_screen(compare)
        await wait_for(pilot, lambda: any(isinstance(node, CompareScreen) for node in app.failed_nodes), what="the compare view's failure")
        gone = weakref.ref(compare)
        del compare
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CompareScreen), what="the compare view to close")
        await pilot.pause()

        def collected() -> bool:  # the worker manager lets go of a finished worker a tick later (later under load)
            gc.collect()
            return gone() is None

        await wait_for(pilot, collected, what="the closed compare view to be collected")
        assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
