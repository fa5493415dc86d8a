"""Chat with a model, tokens streaming in; optionally the base model answering beside it.

Each model has its `ChatPane` (tui/widgets/chat_pane.py), which owns its worker process.
Starting and killing a worker happen in thread workers, so no key ever waits on a process. Escape stops an answer (and, when none is being
written, closes the chat); a crashed worker shows why and ctrl+r starts it again with the
conversation kept.
"""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.validation import Integer, Number
from textual.widgets import Footer, Input, Label

from backend.chat.protocol import GenerationSettings
from backend.checkpoints.targets import ModelTarget, resolve_target
from tui.widgets.chat_pane import ChatPane


def builtin_model(target: ModelTarget) -> bool:
    """Whether `target` is the built-in demo model (or a fine-tune of it)."""
    from backend.models.demo.build import BUILTIN_MODELS, builtin_model_path

    model = Path(target.model).expanduser().resolve()
    return any(model == builtin_model_path(name).resolve() for name in BUILTIN_MODELS)


def default_temperature(target: ModelTarget) -> str:
    """Greedy for the built-in demo model: sampled, its tiny vocabulary answers in broken mixed scripts, and the
    first chat should show what training did; elsewhere the sampling most chat models ship with."""
    return "0" if builtin_model(target) else "0.7"


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

    def __init__(self, target: ModelTarget | str | Path, *, compare: bool = False) -> None:
        """`target`: a ModelTarget, or a run / checkpoint / model reference (TargetError if unusable)."""
        super().__init__()
        self.target = target if isinstance(target, ModelTarget) else resolve_target(str(target))
        self.start_compare = compare

    def compose(self) -> ComposeResult:
        with Horizontal(id="chat-body"):
            role = "fine-tuned" if self.target.base() is not None else "model"
            yield Horizontal(ChatPane(self.target, role, id="pane-tuned"), id="panes")
            with VerticalScroll(id="chat-settings"):  # scrolls at 80x24
                yield Label("Settings", classes="settings-title")
                yield Label("System prompt (empty: the template's)")
                yield Input(id="system", placeholder="template default")
                if builtin_model(self.target):
                    yield Label("Temperature (0 = greedy: the default for the built-in demo model, whose "
                                "samples are noise)", id="temperature-label")
                else:
                    yield Label("Temperature (0 = greedy)", id="temperature-label")
                yield Input(default_temperature(self.target), id="temperature", type="number",
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

    def on_mount(self) -> None:
        self.title = f"chat - {self.target.label or self.target.model}"
        for field in self.query(Input):
            field.cursor_blink = False
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
        if action == "compare" and self.target.base() is None:
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
        base = self.target.base()
        if base is None:
            self.notify("the base model of this model is not known", severity="warning")
            return
        self.query_one("#panes", Horizontal).mount(ChatPane(base, "base", id="pane-base"))

    def action_close(self) -> None:
        self.dismiss(None)
