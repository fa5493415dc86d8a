"""The chat screen with real chat workers (a LoRA checkpoint of the tiny model and its base).

One pilot session walks the whole life of a chat, since each worker takes seconds to load:
loading state, streaming, settings, Esc stops an answer, ctrl+n drops one, a conversation longer
than the context, a crashed worker and its restart, and no process left once the app has exited.
Along the way the screen as a terminal shows it (rebuilt from the bytes the app writes, which skip
every repaint they can for slow links) is checked against the app's own picture.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import App
from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import Input, LoadingIndicator, Static

from backend.chat.protocol import Chunk, Done, printable
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import wait_gone
from tui.app import WorkbenchApp
from tui.screens.chat import ChatPane, ChatScreen

pytestmark = pytest.mark.slow


@pytest.fixture
def short_run(short_lora_run: RunFolder) -> RunFolder:
    """Four LoRA steps (tests/conftest.py): a real checkpoint with a base model to compare against."""
    return short_lora_run


class TerminalScreen:
    """The cells a terminal shows, rebuilt from the frames the app writes to it (a headless app writes
    none: each is rendered here as it would be sent). A repaint the app skipped leaves stale cells."""

    PIECE = re.compile(r"\x1b\[(\d+);(\d+)H|\x1b\[[0-9;?]*[A-Za-z]|\n|([^\x1b\n])")

    def __init__(self, app: App[None]) -> None:
        self.app = app
        self.cells: list[list[str]] = []
        display = app._display

        def replaying(screen, update) -> None:  # type: ignore[no-untyped-def]
            if update is not None:
                self.write(update.render_segments(app.console))
            display(screen, update)

        app._display = replaying  # type: ignore[method-assign]

    def write(self, data: str) -> None:
        width, height = self.app.size
        if len(self.cells) != height:
            self.cells = [[" "] * width for _ in range(height)]
        y = x = 0
        for piece in self.PIECE.finditer(data):
            if piece.group(1):
                y, x = int(piece.group(1)) - 1, int(piece.group(2)) - 1
            elif piece.group(3):
                char, cells = piece.group(3), cell_len(piece.group(3))
                if 0 <= y < height and 0 <= x <= width - cells:
                    self.cells[y][x:x + cells] = [char] + [""] * (cells - 1)  # a wide character takes two
                x += cells

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.cells]

    def app_picture(self) -> list[str]:
        """The whole screen as the app would paint it now (Textual's compositor, all of it)."""
        return ["".join(segment.text for segment in strip).rstrip()
                for strip in self.app.screen._compositor.render_strips()]


class ChatHost(App[None]):
    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.terminal = TerminalScreen(self)

    def on_mount(self) -> None:
        self.push_screen(ChatScreen(self.run_dir, compare=True))


async def until(pilot: Pilot, condition: Callable[[], object], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.1)


def text_of(widget: Static) -> str:
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


def worker_events(messages: list[Message], pane: ChatPane, kind: type) -> list[object]:
    return [m.event for m in messages
            if isinstance(m, ChatPane.WorkerEvent) and m.control is pane and isinstance(m.event, kind)]


async def terminal_lines(pilot: Pilot) -> list[str]:
    """The terminal's rows once the app is idle, checked to be the app's own picture: nothing stale."""
    await pilot.pause()
    terminal = pilot.app.terminal
    assert terminal.lines() == terminal.app_picture()
    return terminal.lines()


async def send(pilot: Pilot, prompt: str) -> None:
    field = pilot.app.screen.query_one("#prompt", Input)
    field.focus()
    field.value = prompt
    await pilot.press("enter")


async def send_and_press_mid_answer(pilot: Pilot, prompt: str, key: str, panes: tuple[ChatPane, ...]) -> None:
    """Send `prompt` and press `key` as soon as both panes are answering it.

    A pilot's press waits until the app is idle, and an app receiving a stream of chunks is not: on an idle
    machine the random base model's answer (500-1000 tokens, depending on the CPU's arithmetic) is over
    before `pilot.press("enter")` returns. So the keys are posted as a terminal sends them, and the second
    one as soon as the request is out (the model needs longer than that for its first token)."""
    field = pilot.app.screen.query_one("#prompt", Input)
    field.focus()
    field.value = prompt
    pilot.app.post_message(events.Key("enter", "\r"))
    deadline = time.monotonic() + 20
    while not (field.value == "" and all(pane.busy for pane in panes)):
        assert time.monotonic() < deadline, "the prompt was never taken"
        await asyncio.sleep(0.002)
    pilot.app.post_message(events.Key(key, None))
    await pilot.pause()


async def test_chat_screen_streams_stops_restarts_and_leaves_no_process(short_run: RunFolder) -> None:
    messages: list[Message] = []
    app = ChatHost(short_run.path)
    async with app.run_test(size=(160, 50), message_hook=messages.append) as pilot:
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        await until(pilot, lambda: len(screen.panes()) == 2, "the run's model found (in the chat's worker)")
        tuned, base = screen.query_one("#pane-tuned", ChatPane), screen.query_one("#pane-base", ChatPane)
        assert tuned.target.adapters and not base.target.adapters

        # loading: a spinner and a status line, never a blank screen
        assert tuned.has_class("-loading") and tuned.query_one(LoadingIndicator).display
        await until(pilot, lambda: "loading the model" in text_of(tuned.query_one(".status-text", Static)),
                    "the loading status")
        await until(pilot, lambda: tuned.client.state == base.client.state == "ready", "both models to load")
        assert not tuned.query_one(LoadingIndicator).display
        assert "loaded in" in text_of(tuned.query_one(".status-text", Static))
        first_pids = [tuned.client.pid, base.client.pid]

        # an invalid setting names the field and sends nothing
        screen.query_one("#temperature", Input).value = "5"
        await send(pilot, "hello")
        assert not tuned.history and screen.focused is screen.query_one("#temperature", Input)

        # streaming: the answer grows chunk by chunk in both panes
        screen.query_one("#temperature", Input).value = "0"
        screen.query_one("#max-tokens", Input).value = "24"
        await send(pilot, "who are you?")
        await until(pilot, lambda: len(tuned.history) == len(base.history) == 2, "both answers")
        for pane in (tuned, base):
            chunks, done = worker_events(messages, pane, Chunk), worker_events(messages, pane, Done)
            assert len(chunks) >= 2 and len(done) == 1
            assert messages.index(next(m for m in messages if getattr(m, "event", None) is chunks[0])) < \
                messages.index(next(m for m in messages if getattr(m, "event", None) is done[0]))
            answer = pane.query(".bubble.answer").last()
            assert text_of(answer) == printable(done[0].text) and done[0].text == pane.history[-1]["content"]
        # the terminal: the question in both panes, both status lines saying the answer ended, Esc's key
        shown = "\n".join(await terminal_lines(pilot))
        assert shown.count("who are you?") == 2 and shown.count("tokens in") == 2
        assert "answering" not in shown and "esc Stop/Back" in shown.splitlines()[-1]

        # stop: Esc ends the answers being written, pressed as soon as both panes are answering (see
        # send_and_press_mid_answer). (The stopped answer stays in the history; a later question longer
        # than the 1024-token context is trimmed by the worker, tested below.)
        screen.query_one("#temperature", Input).value = "0"
        screen.query_one("#max-tokens", Input).value = "1000"
        done_before = {pane: len(worker_events(messages, pane, Done)) for pane in (tuned, base)}
        await send_and_press_mid_answer(pilot, "tell me a long story", "escape", (tuned, base))
        await until(pilot, lambda: all(len(worker_events(messages, pane, Done)) > done_before[pane]
                                       for pane in (tuned, base)), "both answers to end on screen")
        stopped = worker_events(messages, base, Done)[-1]
        assert stopped.finish_reason == "stopped" and stopped.tokens < 976
        assert text_of(base.query(".bubble.answer").last()).endswith("[stopped]")
        assert app.screen is screen  # Esc stopped the answers; it did not close the chat

        # ctrl+n during an answer: the answer is dropped with its conversation, and its end (which
        # arrives later) does not come back as an orphan turn of the new one
        done_before = {pane: len(worker_events(messages, pane, Done)) for pane in (tuned, base)}
        await send_and_press_mid_answer(pilot, "tell me another long story", "ctrl+n", (tuned, base))
        await until(pilot, lambda: all(len(worker_events(messages, pane, Done)) > done_before[pane]
                                       for pane in (tuned, base)), "the dropped answers to end")
        await until(pilot, lambda: not tuned.busy and not base.busy, "both panes to be free")
        for pane in (tuned, base):
            assert pane.history == [] and not pane.query(".bubble"), pane.history
        shown = "\n".join(await terminal_lines(pilot))  # no bubble of the forgotten conversation is left drawn
        assert "who are you?" not in shown and "story" not in shown

        # a conversation longer than the model's context (1024 tokens) loses its oldest turns, not the answer
        long_turns = [{"role": "user", "content": "tell me about yourself " * 60},
                      {"role": "assistant", "content": "I am a small model " * 60}] * 3
        for pane in (tuned, base):
            pane.history = list(long_turns)  # as if the user had talked that long
        screen.query_one("#max-tokens", Input).value = "8"
        await send(pilot, "who are you?")
        await until(pilot, lambda: len(tuned.history) == len(base.history) == len(long_turns) + 2,
                    "answers to a conversation longer than the context")
        for pane in (tuned, base):
            assert not pane.query(".bubble.error"), text_of(pane.query(".bubble.error").last())

        # a crashed worker: a clear message, then ctrl+r brings it back with the conversation kept
        os.kill(tuned.client.pid, signal.SIGKILL)
        await until(pilot, lambda: tuned.has_class("-dead"), "the crash to show")
        assert "killed by SIGKILL" in text_of(tuned.query(".bubble.error").last())
        history = list(tuned.history)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: tuned.client.state == "ready", "the restarted worker")
        assert tuned.client.pid not in first_pids and tuned.history == history and base.client.pid == first_pids[1]
        screen.query_one("#max-tokens", Input).value = "8"
        await send(pilot, "who are you?")
        await until(pilot, lambda: len(tuned.history) == len(history) + 2, "an answer after the restart")
        pids = [*first_pids, tuned.client.pid]

        # ctrl+o hides and shows the settings (system prompt, temperature, top-p, max new tokens)
        settings = screen.query_one("#chat-settings")
        shown_before = settings.has_class("-hidden")
        await pilot.press("ctrl+o")
        assert settings.has_class("-hidden") != shown_before
        await pilot.press("ctrl+o")
        assert settings.has_class("-hidden") == shown_before
        # ctrl+b takes the base model's pane away (its worker ends) and puts it back beside the tuned one
        await pilot.press("ctrl+b")
        await until(pilot, lambda: not screen.query("#pane-base"), "the base pane to go")
        assert wait_gone([first_pids[1]]) == [], "the base pane's worker outlived its pane"
        await pilot.press("ctrl+b")
        await until(pilot, lambda: bool(screen.query("#pane-base")), "the base pane to come back")
        again = screen.query_one("#pane-base", ChatPane)
        assert again.target.adapters == () and again.target.model == base.target.model
        await until(pilot, lambda: again.client.pid is not None, "the base pane's new worker")
        pids.append(again.client.pid)

    assert wait_gone(pids) == [], "a chat worker outlived the app"


async def test_open_chat_pushes_the_screen_or_says_why_not(short_run: RunFolder, tmp_path: Path) -> None:
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(140, 40)) as pilot:
        app.open_chat(tmp_path / "nothing-here")  # drawn at once, closed once its worker found nothing
        await until(pilot, lambda: not isinstance(app.screen, ChatScreen), "the chat to close")
        assert any("Cannot open the chat" in (n.title or "") for n in app._notifications)
        app.open_chat(short_run.path)
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        await until(pilot, lambda: app.screen.query("#pane-tuned"), "the run's model found")
        pane = app.screen.query_one("#pane-tuned", ChatPane)
        await until(pilot, lambda: pane.client.pid is not None, "the worker to start")
        pid = pane.client.pid
        await pilot.press("escape")  # nothing being answered: Esc leaves the chat
        await pilot.pause()
        assert not isinstance(app.screen, ChatScreen)
    assert wait_gone([pid]) == []


async def test_quitting_the_app_while_the_models_load_leaves_no_worker(short_run: RunFolder) -> None:
    """The panes unmount as the app shuts down, after Textual has cancelled the app's workers: the
    model workers must still be stopped (a run in CI left one behind when its close was a worker)."""
    app = ChatHost(short_run.path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: len(app.screen.query(ChatPane)) == 2, "the run's model found")
        panes = list(app.screen.query(ChatPane))
        await until(pilot, lambda: all(pane.client.pid is not None for pane in panes), "both workers to start")
        pids = [pane.client.pid for pane in panes]
        app.exit()  # still loading: nothing answered yet
    assert len(pids) == 2 and wait_gone([pid for pid in pids if pid is not None]) == []
