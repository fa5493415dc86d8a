"""Every kind of worker, made to fail: the user sees the error where it happened and as a toast, the
TUI's log has it, and ctrl+r runs it again.

The error message holds markup (`[/]`): it must show as written, not raise or vanish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from run_fixtures import fixture_run, wait_for
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widget import Widget

from backend.checkpoints.targets import resolve_target
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle, shown
from tui.app import WorkbenchApp
from tui.screens.chat import ChatScreen
from tui.screens.compare import CompareScreen
from tui.screens.monitor import MonitorScreen

ERROR = "boom [/] x"


def boom(*args: object, **kwargs: object) -> object:
    raise RuntimeError(ERROR)


async def until(pilot: Pilot, condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    await wait_for(pilot, condition, timeout=timeout, what=what)  # scaled with the machine (tests/timing.py)


def toasts(messages: list[Message]) -> str:
    """Every toast raised so far (an error toast lasts 12 s: on a loaded machine it may be gone before
    the test looks, so the Notify messages are read; test_hostile_names reads a toast on screen)."""
    return " | ".join(m.notification.message for m in messages if isinstance(m, Notify)
                      and not m.notification.markup)


def logged() -> str:
    handlers = [h for h in logging.getLogger("workbench.tui").handlers if getattr(h, "workbench", False)]
    return Path(handlers[0].baseFilename).read_text(encoding="utf-8")


async def launch_tab(pilot: Pilot, tab: str) -> None:
    await settle(pilot)
    pilot.app.screen.form.show_tab(tab)
    await pilot.pause()


async def press(pilot: Pilot, *keys: str) -> None:
    await settle(pilot)
    await pilot.press(*keys)
    await pilot.pause()


async def open_compare(pilot: Pilot) -> None:
    runs = [fixture_run(Path(pilot.app.workspace), name) for name in ("quickstart-short", "cpu-fp16-overflow")]
    await pilot.app.push_screen(CompareScreen([r.path for r in runs]))


async def open_monitor(pilot: Pilot) -> None:
    run = fixture_run(Path(pilot.app.workspace), "quickstart-short")
    # an hour between frames: within the test only ctrl+r reads the run again (the next frame would too)
    await pilot.app.push_screen(MonitorScreen(run.path, poll_interval=3600.0))


async def open_chat(pilot: Pilot) -> None:
    await pilot.app.push_screen(ChatScreen(resolve_target(str(pilot.app.tiny_model))))


def header(pilot: Pilot) -> Widget:
    return pilot.app.screen.query_one("HeaderTitle")


# kind, what fails, how the user gets there, where the error shows, what shows once ctrl+r succeeds
CASES: list[tuple[str, str, Callable, Callable[[Pilot], Widget], str]] = [
    ("hardware", "tui.screens.launch.detect_hardware", settle,
     lambda p: p.app.screen.query_one("#status-hardware"), "CPUs"),
    ("model details", "tui.widgets.model_details.describe_source", settle,
     lambda p: p.app.screen.query_one("#model-details"), "vocab"),
    ("dataset scan", "tui.widgets.dataset_details.inspect_ref", lambda p: launch_tab(p, "data"),
     lambda p: p.app.screen.query_one("#dataset-summary"), "53 rows"),
    ("memory forecast", "tui.widgets.memory_line.forecast_summary", settle,
     lambda p: p.app.screen.query_one("#memory-line"), "Memory (CPU run): host RAM"),
    ("model picker", "tui.modals.model_picker.discover_models", lambda p: press(p, "f7"),
     lambda p: p.app.screen.query_one("#model-list"), "builtin:tiny-qwen2 [built-in]"),
    ("dataset picker", "tui.modals.dataset_picker.find_dataset_files", lambda p: press(p, "f8"),
     lambda p: p.app.screen.query_one("#dataset-list"), "tests/fixtures/eval/quill_mcq.jsonl [local]"),
    ("runs list", "tui.screens.runs.SummaryCache.reload", lambda p: press(p, "f3"),
     lambda p: p.app.screen.query_one("#runs-note"), "never stops one"),
    ("compare", "tui.screens.compare.load_run_store", open_compare, header, "train loss"),
    ("monitor", "tui.feed.RunFeed.poll", open_monitor, header, "closing the app or this screen never stops the run"),
    ("chat worker", "backend.chat.client.ChatClient.start", open_chat,
     lambda p: p.app.screen.query_one(".status-text"), "loading the model"),
]


@pytest.mark.parametrize("kind, target, reach, where, after_retry", CASES, ids=[c[0] for c in CASES])
async def test_a_failed_worker_is_shown_logged_and_retried(
    kind: str, target: str, reach: Callable, where: Callable[[Pilot], Widget], after_retry: str,
    isolated_runs: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(target, boom)
    app = WorkbenchApp(QUICKSTART, hardware=None if kind == "hardware" else CPU_BOX)
    app.workspace, app.tiny_model = isolated_runs, tiny_model  # type: ignore[attr-defined]
    messages: list[Message] = []
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await reach(pilot)
        await until(pilot, lambda: ERROR in shown(where(pilot)), f"the {kind} failure to show in place")
        assert "ctrl+r" in shown(where(pilot))
        await until(pilot, lambda: ERROR in toasts(messages), "the toast (with markup off)")
        assert f"RuntimeError: {ERROR}" in logged()
        monkeypatch.undo()  # the cause goes away; the user asks again
        await pilot.press("ctrl+r")
        await until(pilot, lambda: after_retry in shown(where(pilot)) and ERROR not in shown(where(pilot)),
                    f"the {kind} retry to succeed")
