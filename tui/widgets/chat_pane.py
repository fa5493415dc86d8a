"""One model's side of the chat: its worker process, its conversation, its transcript.

Each `ChatPane` owns one `ChatClient` (backend/chat/client.py): the model loads in a worker
subprocess, so the TUI never imports torch. The client's reader thread posts every event to
its pane as a `ChatPane.WorkerEvent` (post_message is thread-safe); the pane grows the answer
chunk by chunk. Events of an answer the user dropped (ctrl+n) are ignored, so a stopped
answer never lands in the next conversation. Closing the pane kills its worker in a thread (the
client waits a bounded time for it): the UI never waits on a process.
"""

from __future__ import annotations

import threading
import time
from typing import cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import Reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Label, LoadingIndicator, Static

from backend.chat.client import ChatClient
from backend.chat.protocol import (
    ChatEvent,
    ChatWorkerError,
    Chunk,
    Done,
    Failed,
    GenerationSettings,
    Ready,
    Status,
    WorkerDied,
    printable,
)
from backend.checkpoints.targets import ModelTarget
from tui.safe import plain
from tui.worker_failures import WorkerFailures

ANSWER_PAINT_SECONDS = 0.1
CLOSE_WAIT_SECONDS = 3.0  # for SIGTERM, then again for SIGKILL: a closed pane's worker is gone within ~6 s


class PaintedByLayout:
    """Mixin for the transcript and its bubbles: a change of the widget's virtual size repaints nothing more.

    Textual's Widget declares `virtual_size` a reactive that repaints the widget and lays it out again when
    it changes. For a widget that does not scroll it is its size, for a scroll container what its layout
    found: either way it changes in a layout, which has already repainted what moved. The repaint is a
    second frame of the whole widget - of the whole transcript once the answer fills it (~2 KB at 80x24) -
    each time a bubble is mounted or the answer grows. (A scrollbar coming or going still lays the
    transcript out again: that is its own reactive.)"""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), repaint=False)


class Bubble(PaintedByLayout, Static):
    """The user's message, or an error."""


class AnswerText(PaintedByLayout, Widget):
    """The answer being written, painted so that a slow link pays for the text, not for repaints.

    Text is only appended, so with greedy wrapping only the last line (or the new ones) change: a paint
    re-sends just those. While streaming, the bubble's height is kept a multiple of GROW_LINES (blank
    lines below the text), so the layout (which repaints the whole bubble) runs once every GROW_LINES
    lines (half the transcript's height once it scrolls), not once a line; the finished answer gets its
    exact height."""

    GROW_LINES = 4
    DEFAULT_CSS = """
    AnswerText { height: auto; }
    """

    def __init__(self, text: str, *, classes: str) -> None:
        super().__init__(classes=classes)
        self._raw = text  # as the worker sent it (printable() may change control characters' length)
        self._text = Text(printable(text))
        self.streaming = True
        self._lines = 0  # lines of text painted (the height may be more while streaming)

    @property
    def content(self) -> Text:
        """The text shown (as Static's `content`)."""
        return self._text

    def render(self) -> Text:
        return self._text

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        lines = super().get_content_height(container, viewport, width)
        if not self.streaming:
            return lines
        step = self.GROW_LINES
        shown = self.parent.size.height if isinstance(self.parent, Widget) else 0  # the transcript's rows
        if shown and lines > shown - step:  # it scrolls from now on, and a scroll repaints all the rows:
            step = max(step, shown // 2)  # half a page at a time
        return -(-lines // step) * step

    def show(self, text: str, *, streaming: bool = True) -> bool:
        """Show `text`; True when the bubble's height may change (the transcript's end moves)."""
        rewritten = not text.startswith(self._raw)  # "..." replaced (or a new answer): all of it
        self._raw, self._text = text, Text(printable(text))
        width, height = self.content_size
        self.clear_cached_dimensions()
        before, self.streaming = self.streaming, streaming
        lines = super().get_content_height(self.content_size, self.app.size, width) if width else 0
        painted, self._lines = self._lines, lines
        if rewritten or not width or streaming != before \
                or self.get_content_height(self.content_size, self.app.size, width) != height:
            self.refresh(layout=True)
            return True
        first = max(0, painted - 1)
        self.refresh(Region(0, first, width, max(1, lines - first)))
        return False


class Transcript(PaintedByLayout, VerticalScroll):
    """The conversation's bubbles, scrolled."""


class ChatPane(WorkerFailures, Vertical):
    """One model's side of the chat: its worker, its conversation, its transcript."""

    DEFAULT_CSS = """
    ChatPane {
        width: 1fr;
        height: 100%;
        border: round $primary;
        padding: 0 1;
        .pane-title { text-style: bold; width: 100%; }
        .pane-status {
            height: 1;
            LoadingIndicator { display: none; width: 6; height: 1; min-height: 1; }
            .status-text { width: 1fr; color: $text-muted; }
        }
        &.-loading .pane-status LoadingIndicator { display: block; }
        &.-dead {
            border: round $error;
            .status-text { color: $error; }
        }
        /* the scrollbar is always there: one that comes when the transcript first overflows narrows every
           bubble, a second layout and repaint of the whole transcript (~2 KB at 80x24); one column wide */
        .transcript { height: 1fr; overflow-y: scroll; scrollbar-size-vertical: 1; }
        .bubble { width: 100%; height: auto; margin-top: 1; padding: 0 1; }
        .user { background: $boost; text-style: bold; }
        .answer { color: $text; }
        .error { color: $error; border-left: thick $error; }
    }
    """

    class WorkerEvent(Message):
        """Something the worker said; posted from the client's reader thread."""

        def __init__(self, pane: ChatPane, event: ChatEvent) -> None:
            super().__init__()
            self.pane = pane
            self.event = event

        @property
        def control(self) -> ChatPane:
            return self.pane

    def __init__(self, target: ModelTarget, role: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="chat-pane -loading")
        self.target = target
        self.role = role
        self.client = ChatClient(target, on_event=self._from_thread, name=role)
        self.history: list[dict[str, str]] = []
        self._answer: AnswerText | None = None
        self._answer_text = ""
        self._paint_timer: Timer | None = None
        self._request: str | None = None  # the answer this pane waits for (events of others are dropped)
        self._conversation = 0  # counts ctrl+n: bubbles of a forgotten conversation are not mounted
        self._load_started = 0.0
        self._status_message = "starting"

    def compose(self) -> ComposeResult:
        yield Label(plain(f"{self.role}: {self.target.label or self.target.model}"), classes="pane-title")
        with Horizontal(classes="pane-status"):
            yield LoadingIndicator()
            yield Static("", classes="status-text")
        yield Transcript(classes="transcript")

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)
        self.start_worker()

    def on_unmount(self) -> None:
        # Not a Textual worker: a pane unmounts as the app shuts down, after the app has cancelled its
        # workers, and one started then may never run. A plain non-daemon thread outlives the app and
        # holds the interpreter open until the model worker is gone (at most ~2 x CLOSE_WAIT_SECONDS).
        threading.Thread(target=self.client.close, args=(CLOSE_WAIT_SECONDS,), daemon=False,
                         name=f"{self.client.name}-close").start()

    # -- the worker

    def _from_thread(self, event: ChatEvent) -> None:
        self.post_message(self.WorkerEvent(self, event))

    def start_worker(self, restart: bool = False) -> None:
        """Show the loading state and start (or restart) the model worker off the UI thread."""
        if restart:
            self._drop_unanswered(" [interrupted]")
        self._show_loading()
        self._spawn(restart)

    @work(thread=True, exclusive=True, group="chat-process", exit_on_error=False, description="Starting the model worker")
    def _spawn(self, restart: bool) -> None:
        try:
            if restart:
                self.client.restart()
            else:
                self.client.start()
        except ChatWorkerError:
            pass  # the pane was closed meanwhile: nothing to start

    def _show_loading(self) -> None:
        self._load_started = time.monotonic()
        self._status_message = "starting the model worker"
        self.set_class(True, "-loading")
        self.set_class(False, "-dead")
        self._tick()

    def _tick(self) -> None:
        if self.has_class("-loading"):
            waited = time.monotonic() - self._load_started
            self._set_status(f"loading the model... {waited:.0f} s ({self._status_message})")

    def _set_status(self, text: str) -> None:
        self.query_one(".status-text", Static).update(Text(text))

    @property
    def busy(self) -> bool:
        return self.client.current_id is not None

    @property
    def dead(self) -> bool:
        return self.client.state == "dead"

    # -- talking

    def ask(self, prompt: str, settings: GenerationSettings) -> None:
        """Add the user's message and ask the worker for the answer (queued while loading)."""
        if self.dead:
            self._add(("error", "the model worker is not running; ctrl+r restarts it"))
            return
        self.history.append({"role": "user", "content": prompt})
        self._answer_text = ""
        self._answer = cast(AnswerText, self._add(("user", prompt), ("answer", "...")))  # one layout, one repaint
        try:
            self._request = self.client.generate(self.history, settings)
        except (ChatWorkerError, ValueError) as err:
            self.history.pop()
            self._finish_answer(f"(not sent: {err})")
        if self._request is not None:
            self._set_status("answering - esc stops")

    def stop(self) -> None:
        self.client.stop()

    def clear(self) -> None:
        """Forget the conversation; an answer still being stopped ends without a trace."""
        self._request, self._answer, self._answer_text = None, None, ""
        self._conversation += 1
        self.history.clear()
        self.query_one(".transcript", VerticalScroll).remove_children()

    def show_failure(self, message: str) -> None:
        self.set_class(False, "-loading")
        self.set_class(True, "-dead")
        self._set_status(f"{message} - ctrl+r restarts the model worker")

    def retry(self) -> None:
        self.start_worker(restart=True)

    def _add(self, *bubbles: tuple[str, str]) -> Widget:
        """Mount (kind, text) bubbles in one go and show the end; the last bubble is returned."""
        widgets = [AnswerText(text, classes=f"bubble {kind}") if kind == "answer"
                   else Bubble(Text(printable(text)), classes=f"bubble {kind}") for kind, text in bubbles]
        self.call_next(self._mount_bubbles, widgets, self._conversation)
        return widgets[-1]

    async def _mount_bubbles(self, widgets: list[Widget], conversation: int) -> None:
        """Mount the bubbles and paint them in one frame: once they are mounted Textual repaints the whole
        transcript, which without the batch is a second frame after the one that shows them (~1.3 KB at
        80x24, more once it scrolls)."""
        if conversation != self._conversation:
            return  # ctrl+n came first
        transcript = self.query_one(".transcript", VerticalScroll)
        with self.app.batch_update():
            await transcript.mount_all(widgets)
            transcript.anchor()  # at the end (again, if the user scrolled up) and kept there as the answer grows

    def _finish_answer(self, suffix: str = "") -> None:
        if self._answer is not None:
            self._answer.show(self._answer_text + suffix, streaming=False)
        self._answer = None

    @on(WorkerEvent)
    def _on_worker_event(self, message: WorkerEvent) -> None:
        message.stop()
        event = message.event
        if isinstance(event, (Chunk, Done, Failed)) and event.request_id is not None \
                and event.request_id != self._request:
            if not isinstance(event, Chunk) and self._request is None:
                self._set_status("ready")  # the worker is free again
            return  # the end of an answer the user dropped (ctrl+n): it belongs to no conversation
        if isinstance(event, Status):
            self._status_message = event.message
            self._tick()
            return
        if isinstance(event, Ready):
            self.set_class(False, "-loading")
            loaded = f"loaded in {event.seconds:.1f} s"
            # asked while it loaded: the answer is being written now
            self._set_status(f"ready - {loaded}" if self._request is None else f"answering - esc stops ({loaded})")
            return
        if isinstance(event, Chunk):
            self._answer_text += event.text
            self._schedule_answer_paint()
            return
        if isinstance(event, Done):
            self._on_done(event)
        elif isinstance(event, Failed):
            self._on_failed(event)
        elif isinstance(event, WorkerDied):
            self._on_died(event)

    def _schedule_answer_paint(self) -> None:
        """Tokens arriving within ANSWER_PAINT_SECONDS are painted together: one frame, not one per
        token (each frame re-sends the bubble over SSH)."""
        if self._paint_timer is None:
            self._paint_timer = self.set_timer(ANSWER_PAINT_SECONDS, self._paint_answer)

    def _paint_answer(self) -> None:
        self._paint_timer = None
        if self._answer is not None:
            self._answer.show(self._answer_text)  # the anchored transcript follows its growth in the same frame

    def _on_done(self, event: Done) -> None:
        self._request = None
        self._answer_text = event.text
        self._finish_answer(" [stopped]" if event.finish_reason == "stopped" else "")
        self.history.append({"role": "assistant", "content": event.text})
        # short, the count first: a pane at 80 columns is ~42 wide and cuts the line's end
        first = f" (first {event.first_token_seconds:.2f} s)" if event.first_token_seconds is not None else ""
        self._set_status(f"ready - {event.tokens} tokens in {event.seconds:.1f} s{first}")

    def _drop_unanswered(self, suffix: str) -> None:
        """End an answer that will never come; its question leaves the conversation too."""
        if self._answer is None:
            return
        self._finish_answer(suffix)
        if self.history and self.history[-1]["role"] == "user":
            self.history.pop()

    def _on_failed(self, event: Failed) -> None:
        if event.request_id == self._request:
            self._request = None
        self._drop_unanswered(" [failed]")
        self._add(("error", event.message))
        if self._request is None:
            self._set_status("ready - the answer failed")

    def _on_died(self, event: WorkerDied) -> None:
        self._drop_unanswered(" [interrupted]")
        self.set_class(False, "-loading")
        self.set_class(True, "-dead")
        self._set_status("the model worker stopped - ctrl+r restarts it")
        self._add(("error", event.message))
