"""Helpers for driving the real launch workspace with Textual's pilot."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import WorkerFailed

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import load_profile, save_profile
from tests.timing import scaled, timed_out

QUICKSTART = SHIPPED_PROFILES_DIR / "quickstart.toml"


async def launch_opened(pilot: Pilot, timeout: float = 30.0) -> None:
    """Wait until the launch screen shown has read its profile and built its form (right after its first frame,
    #41), as the user waits for the form to appear."""
    from tests.tui.run_fixtures import wait_for
    from tui.screens.launch import LaunchScreen

    screen = pilot.app.screen
    if isinstance(screen, LaunchScreen):
        await wait_for(pilot, lambda: screen.opened, timeout, what="the launch screen's form")


async def settle(pilot: Pilot, rounds: int = 3) -> None:
    """Let the launch screen build its form, then workers finish and their messages land (scans, model details,
    token counts)."""
    await launch_opened(pilot)
    for _ in range(rounds):
        await pilot.pause()
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerFailed:
            pass  # the app shows a failed worker (tui/worker_failures.py); tests look at the screen
    await pilot.pause()


def shown(widget: Widget) -> str:
    """What a widget draws on the terminal now: its rendered lines, whitespace (and wrapping) collapsed.

    Only what is on screen counts: a widget in a tab that is not shown has no size and draws nothing.
    A container draws through its children: their text follows its own, in order. (The whole widget is
    read, border and padding included: `size` alone would cut off as many lines as they take.)"""
    width, height = widget.outer_size
    lines = widget.render_lines(Region(0, 0, width, height))
    parts = [" ".join(line.text for line in lines)] + [shown(child) for child in widget.children if child.display]
    return " ".join(" ".join(parts).split())


def shown_bold(widget: Widget) -> str:
    """The text a widget draws in bold, run after run (the trained tokens of a trained-token view)."""
    lines = widget.render_lines(Region(0, 0, *widget.outer_size))
    return "".join(segment.text for line in lines for segment in line if segment.style and segment.style.bold)


def oracle_children() -> list[int]:
    """Pids of this test process's live oracle children (`python -m backend.oracle.child`)."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "backend.oracle.child" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


async def until_shown(pilot: Pilot, widget: Widget, text: str, timeout: float = 120.0) -> str:
    """Let the app run until `widget` draws `text` (see `shown`); return what it draws then.

    For answers that arrive later than `settle` waits (a swift child started after an edit settles)."""
    limit, start = scaled(timeout), time.monotonic()
    while text not in (now := shown(widget)):
        if time.monotonic() - start > limit:
            raise timed_out(f"{type(widget).__name__} to show {text!r}; it shows {now[:300]!r}", timeout,
                            time.monotonic() - start)
        await pilot.pause(0.1)
    return now


async def details_tab(pilot: Pilot, screen: Screen, tab: str) -> None:
    """Bring a tab of the details pane (Problems / Command / Config) on screen with F6, as a user does."""
    for _ in range(3):
        if screen.query_one("#details").active == f"details-{tab}":
            break
        await pilot.press("f6")
        await pilot.pause()
    assert screen.query_one("#details").active == f"details-{tab}"
    await pilot.pause()  # drawn at its size


def drawn_lines(widget: Widget) -> list[str]:
    """The lines a widget (and its children) draws on the terminal, trailing blanks removed."""
    lines = [line.text.rstrip() for line in widget.render_lines(Region(0, 0, *widget.outer_size))]
    return [line for line in lines if line] + [line for child in widget.children for line in drawn_lines(child)]


async def command_shown(pilot: Pilot, screen: Screen) -> str:
    """The Command tab as drawn, squeezed: the terminal wraps a long path anywhere, so whitespace and the
    `\\` line continuations are dropped and only the characters and their order compare."""
    await details_tab(pilot, screen, "command")
    return squeezed(" ".join(drawn_lines(screen.query_one("#command-preview"))))


def squeezed(command: str) -> str:
    return "".join(command.replace("\\", " ").split())


@pytest.fixture
def profile_copy(tmp_path: Path) -> Path:
    """The quickstart profile as a user's own (writable) file."""
    target = tmp_path / "profiles" / "mine.toml"
    target.parent.mkdir()
    shutil.copy(QUICKSTART, target)
    return target


@pytest.fixture
def hub_profile(tmp_path: Path) -> Path:
    """A profile naming a hub model and a hub dataset, for the pickers to replace."""
    profile = load_profile(QUICKSTART)
    profile.name = "hub-start"
    profile.model.source = "Qwen/Qwen2.5-0.5B-Instruct"
    profile.model.model_type = None
    profile.model.template = None
    profile.data.train = ["AI-ModelScope/alpaca-gpt4-data-en#100"]
    return save_profile(profile, tmp_path / "hub-start.toml")


@pytest.fixture(scope="session")
def swift_registry(workbench_home: Path) -> dict:
    """ms-swift's model registry, dumped once per session in a child process (about 15 s)."""
    from backend.models.registry import build_swift_registry, load_swift_registry

    return load_swift_registry() or build_swift_registry()
