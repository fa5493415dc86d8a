"""Chat with a model, tokens streaming in; optionally the base model answering beside it.

Each model has its `ChatPane` (tui/widgets/chat_pane.py), which owns its worker process.
Starting and killing a worker happen in thread workers, so no key ever waits on a process. Escape stops an answer (and, when none is being
written, closes the chat); a crashed worker shows why and ctrl+r starts it again with the
conversation kept. A reference to look up (a run, a checkpoint folder, the monitor's "best model of this
run", which reads the run's events and checkpoints) is looked up in a thread worker too: the screen draws at
once and says "finding the model…" until it is known (#41).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.validation import Integer, Number
from textual.widgets import Footer, Input, Label, Static

from backend.chat.protocol import GenerationSettings
from backend.checkpoints.targets import ModelTarget, resolve_target
from tui.widgets.chat_pane import ChatPane


def builtin_model(target: ModelTarget) -> bool:
    """Whether `target` is the built-in demo model (or a fine-tune of it)."""
    from backend.models.demo.build import BUILTIN_MODELS, builtin_model_path

    model = Path(target.model).expanduser().resolve()
    return any(model == builtin_model_path(name).resolve() for name in BUILTIN_MODELS)


def default_temperature(builtin: bool) -> str:
    """Greedy for the built-in demo model: sampled, its tiny vocabulary answers in broken mixed scripts, and the
    first chat should show what training did; elsewhere the sampling most chat models ship with."""
    return "0" if builtin else "0.7"


def temperature_label(builtin: bool) -> str:
    if builtin:
        return "Temperature (0 = greedy: the default for the built-in demo model, whose samples are noise)"
    return "Temperature (0 = greedy)"


Lookup = Callable[[], ModelTarget]
"""Finds the model to chat with (file reads); TargetError says why there is none."""


class ChatScreen(Screen[None]):
    """Talk to a checkpoint or model; ctrl+b puts the base model's answers beside it."""

    CSS_PATH = "chat.tcss"
    AUTO_FOCUS = "#prompt"
    BINDINGS = [
        # one key, two meanings: Esc stops an answer being written, and otherwise leaves the chat. One binding
        # whose label never changes: the footer is not rebuilt when an answer starts and ends (each rebuild
        # re-sent the footer twice over SSH); the pane's status line says "esc stops" while it answers
        Binding("escape", "stop_or_close", "Stop/Back", id="chat-escape",
                tooltip="Stop the answer being written; otherwise close the chat (its workers are stopped)"),
        Binding("ctrl+r", "restart", "Restart", id="chat-restart", tooltip="Restart the model worker(s)"),
        Binding("ctrl+n", "new_chat", "New", id="chat-new", tooltip="A new chat: forget the conversation"),
        Binding("ctrl+b", "compare", "Base", id="chat-compare",
                tooltip="Show or hide the base model answering beside the fine-tuned one"),
        Binding("ctrl+o", "toggle_settings", "Settings", id="chat-settings",
                tooltip="System prompt, temperature, top-p, max new tokens"),
    ]

    @dataclass
    class Found(Message):
        """The lookup's answer: the target (and whether it is the built-in model), or why there is none."""

        target: ModelTarget | None
        builtin: bool = False
        error: str | None = None

    def __init__(self, target: ModelTarget | str | Path | Lookup, *, compare: bool = False) -> None:
        """`target`: a ModelTarget; or a run / checkpoint / model reference, or a lookup, both looked up in a
        worker once the screen is drawn (a reference that cannot be used closes the screen, saying why)."""
        super().__init__()
        self.target: ModelTarget | None = target if isinstance(target, ModelTarget) else None
        self._lookup: Lookup | None = None
        if self.target is None:
            self._lookup = target if callable(target) else partial(resolve_target, str(target))
        self.start_compare = compare

    def compose(self) -> ComposeResult:
        builtin = self.target is not None and builtin_model(self.target)
        with Horizontal(id="chat-body"):
            if self.target is None:
                yield Horizontal(Static("finding the model…", id="chat-finding", markup=False), id="panes")
            else:
                yield Horizontal(self._pane(self.target), id="panes")
            with VerticalScroll(id="chat-settings"):  # scrolls at 80x24
                yield Label("Settings", classes="settings-title")
                yield Label("System prompt (empty: the template's)")
                yield Input(id="system", placeholder="template default")
                yield Label(temperature_label(builtin), id="temperature-label")
                yield Input(default_temperature(builtin), id="temperature", type="number",
                            validators=[Number(0.0, 2.0)])
                yield Label("Top-p (0-1]")
                yield Input("0.9", id="top-p", type="number", validators=[Number(0.0001, 1.0)])
                yield Label("Max new tokens")
                yield Input("256", id="max-tokens", type="integer", validators=[Integer(1, 32768)])
        # over SSH every repaint is bytes: the border is the box's, so a key typed repaints one line (not
        # three), and the cursor does not blink (each blink repainted the field: ~2 KB/s while idle)
        with Vertical(id="prompt-box"):
            yield Input(id="prompt", placeholder="Message (Enter sends, Esc stops the answer)", compact=True)
        yield Footer()

    @staticmethod
    def _pane(target: ModelTarget) -> ChatPane:
        return ChatPane(target, "fine-tuned" if target.base() is not None else "model", id="pane-tuned")

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = False
        if self.target is None:
            self._find()
        else:
            self._target_known()

    def _target_known(self) -> None:
        assert self.target is not None
        self.title = f"chat - {self.target.label or self.target.model}"
        if self.start_compare:
            self.action_compare()
        self.refresh_bindings()

    @work(thread=True, exclusive=True, group="chat-lookup", exit_on_error=False, description="Finding the model")
    def _find(self) -> None:
        assert self._lookup is not None
        try:
            target = self._lookup()
            found = self.Found(target, builtin_model(target))
        except (OSError, ValueError) as err:  # TargetError is a ValueError: it says why and what to pass
            found = self.Found(None, error=str(err))
        self.post_message(found)

    @on(Found)
    async def _found(self, message: Found) -> None:
        if message.target is None:
            self.app.notify(message.error or "no model", title="Cannot open the chat", severity="error", timeout=15,
                            markup=False)
            self.dismiss(None)
            return
        self.target = message.target
        await self.query_one("#chat-finding").remove()
        await self.query_one("#panes", Horizontal).mount(self._pane(message.target))
        self.query_one("#temperature-label", Label).update(temperature_label(message.builtin))
        self.query_one("#temperature", Input).value = default_temperature(message.builtin)
        self._target_known()

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
                                  top_p=values["top-p"], max_new_tokens=int(values["max-tokens"]))

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

    # -- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "compare" and (self.target is None or self.target.base() is None):
            return None
        return True

    def action_stop_or_close(self) -> None:
        if any(pane.busy for pane in self.panes()):
            self.action_stop()
        else:
            self.action_close()

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
        base = self.target.base() if self.target is not None else None
        if base is None:
            self.notify("the base model of this model is not known", severity="warning")
            return
        self.query_one("#panes", Horizontal).mount(ChatPane(base, "base", id="pane-base"))

    def action_close(self) -> None:
        self.dismiss(None)
