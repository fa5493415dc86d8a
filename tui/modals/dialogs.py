"""Small modal screens of the launch workspace: confirm, ask for a path, show a text (diff)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from tui.safe import plain


class ConfirmScreen(ModalScreen[str | None]):
    """A question with a few answers; Escape answers None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog-cancel", tooltip="Close without choosing")]

    def __init__(self, title: str, body: str, choices: Sequence[tuple[str, str, str]], *, id: str | None = None):
        """`choices`: (label, value, variant) per button; the first one has the focus."""
        super().__init__(id=id, classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(plain(self.body), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                for label, value, variant in self.choices:
                    yield Button(label, id=f"choice-{value}", variant=variant, compact=True)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        self.query(Button).first().focus()  # the first answer (the safe one) has the focus

    def answer(self, value: str) -> object:
        """What the screen returns for the button with this value."""
        return value

    @on(Button.Pressed)
    def _chosen(self, event: Button.Pressed) -> None:
        self.dismiss(self.answer((event.button.id or "").removeprefix("choice-")))


class ConfirmModal(ConfirmScreen):
    """Ask before something that cannot be undone (stop, delete): returns True for yes.

    Escape or "Cancel" answers False; `y` answers yes from the keyboard."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "Cancel", id="confirm-cancel", tooltip="Close without doing it"),
        Binding("y", "dismiss(True)", "Yes", show=False, id="confirm-yes", tooltip="Answer yes"),
    ]

    def __init__(self, title: str, body: str, yes: str, *, danger: bool = True, id: str | None = None) -> None:
        super().__init__(title, body, [("Cancel", "no", "default"), (yes, "ok", "error" if danger else "primary")],
                         id=id)

    def answer(self, value: str) -> bool:
        return value == "ok"


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
