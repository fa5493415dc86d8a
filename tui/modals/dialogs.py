"""Small modal screens of the launch workspace: confirm, ask for a path, show a text (diff)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.button import ButtonVariant
from textual.widgets.option_list import Option

from tui.safe import plain

T = TypeVar("T")


@dataclass(frozen=True)
class Choice(Generic[T]):
    """One answer of a `ConfirmScreen`: its button and the typed value the screen returns for it."""

    label: str
    value: T
    variant: ButtonVariant = "default"
    key: str = ""
    """The button's id is `choice-KEY` (default: its place, `choice-0`, `choice-1`, ...)."""


class ConfirmScreen(ModalScreen[T | None], Generic[T]):
    """A question with a few typed answers; the first one has the focus; Escape answers None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog-cancel", tooltip="Close without choosing")]

    def __init__(self, title: str, body: str, choices: Sequence[Choice[T]], *, id: str | None = None):
        super().__init__(id=id, classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.choices = {f"choice-{c.key or index}": c for index, c in enumerate(choices)}

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(plain(self.body), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                for button_id, choice in self.choices.items():
                    yield Button(choice.label, id=button_id, variant=choice.variant, compact=True)
            yield Static("", id="dialog-enter-hint", classes="dialog-hint", markup=False)

    def on_mount(self) -> None:
        self.query(Button).first().focus()  # the first answer has the focus

    @on(events.DescendantFocus)
    def _say_what_enter_does(self, event: events.DescendantFocus) -> None:
        """Enter presses the focused button: the hint names it, whichever has the focus."""
        if isinstance(event.widget, Button) and event.widget.id in self.choices:
            label = self.choices[event.widget.id].label
            self.query_one("#dialog-enter-hint", Static).update(plain(f"Enter: {label} · Tab: next · Esc: cancel"
                                                                      f"{self.extra_keys}"))

    @property
    def extra_keys(self) -> str:
        """Keys beside Enter and Esc, for the hint."""
        return ""

    @on(Button.Pressed)
    def _chosen(self, event: Button.Pressed) -> None:
        self.dismiss(self.choices[event.button.id or ""].value)


class ConfirmModal(ConfirmScreen[bool]):
    """Ask before something that cannot be undone (stop, delete): True for yes.

    "Cancel" (which has the focus) or Escape answers False; `y` answers yes from the keyboard."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "Cancel", id="confirm-cancel", tooltip="Close without doing it"),
        Binding("y", "dismiss(True)", "Yes", show=False, id="confirm-yes", tooltip="Answer yes"),
    ]

    def __init__(self, title: str, body: str, yes: str, *, danger: bool = True, id: str | None = None) -> None:
        super().__init__(title, body, [Choice("Cancel", False, "default", "no"),
                                       Choice(yes, True, "error" if danger else "primary", "ok")], id=id)
        self.yes = yes

    @property
    def extra_keys(self) -> str:
        return f" · y: {self.yes}"


class PathPromptScreen(ModalScreen[Path | None]):
    """Ask for a file path; `check` may refuse one with a message (the dialog stays open)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog-cancel", tooltip="Close without choosing")]

    def __init__(self, title: str, initial: str = "", *, suggestions: Sequence[tuple[str, str]] = (),
                 check: Callable[[Path], str | None] | None = None, id: str | None = None):
        """`suggestions`: (label, path) pairs listed under the input."""
        super().__init__(id=id, classes="dialog-screen")
        self.title_text = title
        self.initial = initial
        self.suggestions = suggestions
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Input(self.initial, id="path-input", compact=True, placeholder="path")
            yield Static("", id="path-error", markup=False)
            if self.suggestions:
                yield OptionList(*[Option(plain(label), id=path) for label, path in self.suggestions],
                                 id="path-suggestions")
            yield Static("Enter: accept · Esc: cancel", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#path-input", Input).focus()

    @on(OptionList.OptionHighlighted, "#path-suggestions")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.query_one("#path-input", Input).value = event.option.id

    @on(OptionList.OptionSelected, "#path-suggestions")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self._accept(event.option.id)

    @on(Input.Submitted, "#path-input")
    def _submitted(self, event: Input.Submitted) -> None:
        self._accept(event.value)

    def _accept(self, text: str) -> None:
        if not text.strip():
            self.query_one("#path-error", Static).update("✗ give a path")
            return
        path = Path(text.strip()).expanduser()
        problem = self.check(path) if self.check else None
        if problem:
            self.query_one("#path-error", Static).update(plain(f"✗ {problem}"))
            return
        self.dismiss(path)


class TextScreen(ModalScreen[None]):
    """A scrollable text (a diff is coloured line by line); Escape closes."""

    BINDINGS = [Binding("escape,q", "dismiss(None)", "Close", id="dialog-close", tooltip="Close this view")]

    def __init__(self, title: str, text: str, *, diff: bool = False, id: str | None = None):
        super().__init__(id=id, classes="dialog-screen")
        self.title_text = title
        self.text = text
        self.diff = diff

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label(self.title_text, classes="dialog-title")
            with VerticalScroll(id="text-scroll", can_focus=True):
                yield Static(self._render_text(), id="text-body")
            yield Static("Esc: close", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#text-scroll").focus()

    def _render_text(self) -> Text:
        if not self.diff:
            return plain(self.text)
        text = Text()
        for line in self.text.splitlines():
            style = ""
            if line.startswith(("+++", "---")):
                style = "bold"
            elif line.startswith("+"):
                style = "green"
            elif line.startswith("-"):
                style = "red"
            elif line.startswith("@@"):
                style = "cyan"
            text.append_text(plain(line + "\n", style))
        return text
