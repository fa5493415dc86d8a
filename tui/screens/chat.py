"""Chat with a model, tokens streaming in; optionally the base model answering beside it.

Each `ChatPane` owns one `ChatClient` (backend/jobs/chat.py): the model loads in a worker
subprocess, so this screen never imports torch. The client's reader thread posts every
event to its pane as a `ChatPane.WorkerEvent` (post_message is thread-safe); the pane
grows the answer chunk by chunk. Starting and killing a worker happen in thread workers,
so no key ever waits on a process. Escape stops an answer (and, when none is being
written, closes the chat); a crashed worker shows why and ctrl+r starts it again with the
conversation kept.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.validation import Integer, Number
from textual.widgets import Footer, Input, Label, LoadingIndicator, Static

from backend.jobs.chat import (
    ChatClient, ChatEvent, ChatWorkerError, Chunk, Done, Failed, GenerationSettings, Ready, Status, WorkerDied,
    printable,
)
from backend.jobs.targets import ModelTarget, resolve_target


class ChatPane(Vertical):
    """One model's side of the chat: its worker, its conversation, its transcript."""

    class WorkerEvent(Message):
        """Something the worker said; posted from the client's reader thread."""

        def __init__(self, pane: ChatPane, event: ChatEvent) -> None:
            super().__init__()
            self.pane = pane
            self.event = event

        @property
        def control(self) -> ChatPane:
            return self.pane

    class Changed(Message):
        """The pane became busy, idle, ready or dead (the screen refreshes its key bindings)."""

    def __init__(self, target: ModelTarget, role: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="chat-pane -loading")
        self.target = target
        self.role = role
        self.client = ChatClient(target, on_event=self._from_thread, name=role)
        self.history: list[dict[str, str]] = []
        self._answer: Static | None = None
        self._answer_text = ""
        self._load_started = 0.0
        self._status_message = "starting"

    def compose(self) -> ComposeResult:
        yield Label(f"{self.role}: {self.target.label or self.target.model}", classes="pane-title")
        with Horizontal(classes="pane-status"):
            yield LoadingIndicator()
            yield Static("", classes="status-text")
        yield VerticalScroll(classes="transcript")

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)
        self.start_worker()

    def on_unmount(self) -> None:
        self.client.close()

    # -- the worker

    def _from_thread(self, event: ChatEvent) -> None:
        self.post_message(self.WorkerEvent(self, event))

    def start_worker(self, restart: bool = False) -> None:
        """Show the loading state and start (or restart) the model worker off the UI thread."""
        if restart:
            self._drop_unanswered(" [interrupted]")
        self._show_loading()
        self._spawn(restart)

    @work(thread=True, exclusive=True, group="chat-process", exit_on_error=False)
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
            self._add("error", "the model worker is not running; ctrl+r restarts it")
            return
        self.history.append({"role": "user", "content": prompt})
        self._add("user", prompt)
        self._answer_text = ""
        self._answer = self._add("answer", "...")
        try:
            self.client.generate(self.history, settings)
        except (ChatWorkerError, ValueError) as err:
            self.history.pop()
            self._finish_answer(f"(not sent: {err})")
        self.post_message(self.Changed())

    def stop(self) -> None:
        self.client.stop()

    def clear(self) -> None:
        self.history.clear()
        self.query_one(".transcript", VerticalScroll).remove_children()

    def _add(self, kind: str, text: str) -> Static:
        bubble = Static(Text(printable(text)), classes=f"bubble {kind}")
        transcript = self.query_one(".transcript", VerticalScroll)
        transcript.mount(bubble)
        transcript.scroll_end(animate=False)
        return bubble

    def _finish_answer(self, suffix: str = "") -> None:
        if self._answer is not None:
            self._answer.update(Text(printable(self._answer_text) + suffix))
        self._answer = None

    @on(WorkerEvent)
    def _on_worker_event(self, message: WorkerEvent) -> None:
        message.stop()
        event = message.event
        if isinstance(event, Status):
            self._status_message = event.message
            self._tick()
        elif isinstance(event, Ready):
            self.set_class(False, "-loading")
            self._set_status(f"ready - loaded in {event.seconds:.1f} s")
        elif isinstance(event, Chunk):
            self._answer_text += event.text
            if self._answer is not None:
                self._answer.update(Text(printable(self._answer_text)))
                self.query_one(".transcript", VerticalScroll).scroll_end(animate=False)
        elif isinstance(event, Done):
            self._on_done(event)
        elif isinstance(event, Failed):
            self._on_failed(event)
        elif isinstance(event, WorkerDied):
            self._on_died(event)
        self.post_message(self.Changed())

    def _on_done(self, event: Done) -> None:
        self._answer_text = event.text
        self._finish_answer(" [stopped]" if event.finish_reason == "stopped" else "")
        self.history.append({"role": "assistant", "content": event.text})
        first = f"first token {event.first_token_seconds:.2f} s, " if event.first_token_seconds is not None else ""
        self._set_status(f"ready - {first}{event.tokens} tokens in {event.seconds:.1f} s")

    def _drop_unanswered(self, suffix: str) -> None:
        """End an answer that will never come; its question leaves the conversation too."""
        if self._answer is None:
            return
        self._finish_answer(suffix)
        if self.history and self.history[-1]["role"] == "user":
            self.history.pop()

    def _on_failed(self, event: Failed) -> None:
        self._drop_unanswered(" [failed]")
        self._add("error", event.message)

    def _on_died(self, event: WorkerDied) -> None:
        self._drop_unanswered(" [interrupted]")
        self.set_class(False, "-loading")
        self.set_class(True, "-dead")
        self._set_status("the model worker stopped - ctrl+r restarts it")
        self._add("error", event.message)


class ChatScreen(Screen[None]):
    """Talk to a checkpoint or model; ctrl+b puts the base model's answers beside it."""

    CSS_PATH = "chat.tcss"
    AUTO_FOCUS = "#prompt"
    BINDINGS = [
        # one key, two meanings: Esc stops an answer being written, and otherwise leaves the chat
        Binding("escape", "stop", "Stop", id="chat-stop", tooltip="Stop the answer being written"),
        Binding("escape", "close", "Back", id="chat-close", tooltip="Close the chat (its workers are stopped)"),
        Binding("ctrl+r", "restart", "Restart", id="chat-restart", tooltip="Restart the model worker(s)"),
        Binding("ctrl+n", "new_chat", "New chat", id="chat-new", tooltip="Forget the conversation"),
        Binding("ctrl+b", "compare", "Base", id="chat-compare",
                tooltip="Show or hide the base model answering beside the fine-tuned one"),
        Binding("ctrl+o", "toggle_settings", "Settings", id="chat-settings",
                tooltip="System prompt, temperature, top-p, max new tokens"),
    ]

    def __init__(self, target: ModelTarget | str | Path, *, compare: bool = False) -> None:
        """`target`: a ModelTarget, or a run / checkpoint / model reference (TargetError if unusable)."""
        super().__init__()
        self.target = target if isinstance(target, ModelTarget) else resolve_target(str(target))
        self.start_compare = compare

    def compose(self) -> ComposeResult:
        with Horizontal(id="chat-body"):
            role = "fine-tuned" if self.target.base() is not None else "model"
            yield Horizontal(ChatPane(self.target, role, id="pane-tuned"), id="panes")
            with Vertical(id="chat-settings"):
                yield Label("Settings", classes="settings-title")
                yield Label("System prompt (empty: the template's)")
                yield Input(id="system", placeholder="template default")
                yield Label("Temperature (0 = greedy)")
                yield Input("0.7", id="temperature", type="number", validators=[Number(0.0, 2.0)])
                yield Label("Top-p (0-1]")
                yield Input("0.9", id="top-p", type="number", validators=[Number(0.0001, 1.0)])
                yield Label("Max new tokens")
                yield Input("256", id="max-tokens", type="integer", validators=[Integer(1, 32768)])
        yield Input(id="prompt", placeholder="Message (Enter sends, Esc stops the answer)")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"chat - {self.target.label or self.target.model}"
        if self.start_compare:
            self.action_compare()

    def panes(self) -> list[ChatPane]:
        return list(self.query(ChatPane))

    # -- settings

    def settings(self) -> GenerationSettings | None:
        """The settings from the form, or None (with the field named) when one is not valid."""
        values = {}
        for field_id, name, kind, fix in (("temperature", "temperature", float, "a number from 0 to 2"),
                                          ("top-p", "top-p", float, "a number above 0 and at most 1"),
                                          ("max-tokens", "max new tokens", int, "a whole number from 1")):
            field = self.query_one(f"#{field_id}", Input)
            validation = field.validate(field.value)
            try:
                if validation is not None and not validation.is_valid:
                    raise ValueError
                values[field_id] = kind(field.value)
            except ValueError:
                self.notify(f"{name}: {field.value!r} is not valid; enter {fix}", severity="error",
                            title="Settings")
                self.query_one("#chat-settings").remove_class("-hidden")
                field.focus()
                return None
        system = self.query_one("#system", Input).value
        return GenerationSettings(system=system or None, temperature=values["temperature"],
                                  top_p=values["top-p"], max_new_tokens=values["max-tokens"])

    # -- sending

    @on(Input.Submitted, "#prompt")
    def _send(self, event: Input.Submitted) -> None:
        prompt = event.value.strip()
        if not prompt:
            return
        if any(pane.busy for pane in self.panes()):
            self.notify("still answering; Esc stops the answer", severity="warning")
            return
        settings = self.settings()
        if settings is None:
            return
        event.input.value = ""
        for pane in self.panes():
            pane.ask(prompt, settings)

    @on(ChatPane.Changed)
    def _pane_changed(self) -> None:
        self.refresh_bindings()

    # -- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("stop", "close"):
            busy = any(pane.busy for pane in self.panes())
            return busy if action == "stop" else not busy
        if action == "compare" and self.target.base() is None:
            return None
        return True

    def action_stop(self) -> None:
        for pane in self.panes():
            pane.stop()

    def action_restart(self) -> None:
        panes = [pane for pane in self.panes() if pane.dead] or self.panes()
        for pane in panes:
            pane.start_worker(restart=True)

    def action_new_chat(self) -> None:
        self.action_stop()
        for pane in self.panes():
            pane.clear()

    def action_toggle_settings(self) -> None:
        self.query_one("#chat-settings").toggle_class("-hidden")

    def action_compare(self) -> None:
        existing = self.query("#pane-base")
        if existing:
            existing.remove()
            return
        base = self.target.base()
        if base is None:
            self.notify("the base model of this model is not known", severity="warning")
            return
        self.query_one("#panes", Horizontal).mount(ChatPane(base, "base", id="pane-base"))

    def action_close(self) -> None:
        self.dismiss(None)
