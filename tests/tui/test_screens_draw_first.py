"""Screens draw first and look things up after (#41): the chat opened from a reference or from the monitor's
`t` is on screen, saying "finding the model…", while its lookup still runs (a slowed lookup: the frame comes
before it returns); the first showing of a screen parses no stylesheet again; the start-up collects no
garbage before its first frame."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from run_fixtures import fixture_run, open_monitor, wait_for
from textual.widgets import Label

from backend.checkpoints import targets
from backend.checkpoints.targets import ModelTarget
from tests.fakes import CPU_BOX
from tests.timing import scaled
from tests.tui.conftest import QUICKSTART, shown
from tui import collector
from tui.app import WorkbenchApp
from tui.screens import chat as chat_screen
from tui.screens.chat import ChatPane, ChatScreen
from tui.screens.runs import RunsScreen


class SlowLookup:
    """A model lookup that returns only once the test lets it (or after a scaled limit): the UI thread would
    wait here if the lookup ran on it."""

    def __init__(self, target: ModelTarget) -> None:
        self.target = target
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, *args: object, **kwargs: object) -> ModelTarget:
        self.release.wait(scaled(5))
        self.returned.set()
        return self.target


@pytest.fixture
def no_model_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChatPane, "start_worker", lambda self, restart=False: None)  # no model process here


async def _finding_then_found(pilot, lookup: SlowLookup, title: str) -> None:  # type: ignore[no-untyped-def]
    try:
        await wait_for(
            pilot,
            lambda: isinstance(pilot.app.screen, ChatScreen) and pilot.app.screen.is_mounted,
            what="the chat screen",
        )
        chat = pilot.app.screen
        assert not lookup.returned.is_set(), "the chat waited for its lookup before it was drawn"
        assert shown(chat.query_one("#chat-finding")) == "finding the model…"
        assert chat.panes() == []
    finally:
        lookup.release.set()
    await wait_for(pilot, lambda: len(chat.panes()) == 1, what="the model's pane")
    assert str(chat.panes()[0].query_one(".pane-title", Label).content) == title
    assert not chat.query("#chat-finding")


async def test_the_chat_from_a_reference_draws_before_its_lookup_returns(
    isolated_runs: Path, monkeypatch: pytest.MonkeyPatch, no_model_worker: None
) -> None:
    lookup = SlowLookup(ModelTarget("/models/some-model", label="some-model"))
    monkeypatch.setattr(chat_screen, "resolve_target", lookup)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        pilot.app.open_chat("some-run")
        await _finding_then_found(pilot, lookup, "model: some-model")


async def test_the_monitors_chat_key_draws_the_chat_before_the_best_model_is_found(
    isolated_runs: Path, monkeypatch: pytest.MonkeyPatch, no_model_worker: None
) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    lookup = SlowLookup(ModelTarget("/models/base", adapters=("/runs/x/checkpoint-4",), label="x checkpoint-4"))
    monkeypatch.setattr(targets, "best_model_of_run", lookup)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        await open_monitor(pilot, run.path)
        await pilot.press("t")
        await _finding_then_found(pilot, lookup, "model: x checkpoint-4")


async def test_a_reference_with_no_model_closes_the_chat_saying_why(isolated_runs: Path, tmp_path: Path) -> None:
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        pilot.app.open_chat(tmp_path / "nothing-here")
        await wait_for(
            pilot,
            lambda: isinstance(pilot.app.screen, RunsScreen) and pilot.app._notifications,
            what="the chat to close",
        )
        (note,) = pilot.app._notifications
        assert note.title == "Cannot open the chat" and "nothing-here" in note.message


async def test_the_first_showing_of_a_screen_parses_no_stylesheet_again(isolated_runs: Path) -> None:
    """Textual parses every stylesheet again and restyles every widget of every screen when a screen brings a
    stylesheet the app has not read: the first F3 (and monitor, chat, queue) cost seconds on a loaded machine."""
    run = fixture_run(isolated_runs, "quickstart-short")
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.first_frame_shown, what="the first frame")
        reparsed: list[str] = []
        stylesheet = app.stylesheet
        original = stylesheet.reparse
        stylesheet.reparse = lambda: (reparsed.append(type(app.screen).__name__), original())[1]  # type: ignore[method-assign]
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen), what="the runs list")
        await open_monitor(pilot, run.path)
        await pilot.press("f7")
        await pilot.pause()
        assert reparsed == []


async def test_the_start_up_collects_no_garbage_and_runs_nothing_beside_its_first_frame(
    isolated_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first frame: no garbage collection, and no worker (the alerts' reads, the launch screen's
    hardware detection) competing with it for the two cores; all of it starts once the frame is drawn."""
    collections: list[int] = []
    at_first_frame: list[list[int]] = []
    workers_at_first_frame: list[list[str]] = []
    drawn = collector.first_frame_drawn

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def first_frame_drawn() -> None:
        at_first_frame.append(list(collections))
        workers_at_first_frame.append([worker.description for worker in app.workers])
        drawn()

    monkeypatch.setattr(collector, "first_frame_drawn", first_frame_drawn)
    gc.callbacks.append(count)
    try:
        app = WorkbenchApp(QUICKSTART)
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(pilot, lambda: app.first_frame_shown, what="the first frame")
            assert gc.isenabled() and gc.get_threshold() == (collector.YOUNG_OBJECTS, *collector.OLDER_PASSES)
    finally:
        gc.callbacks.remove(count)
    assert at_first_frame[:1] == [[]]  # no collection between the app's start and its first frame
    assert workers_at_first_frame[:1] == [[]]
