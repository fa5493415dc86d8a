"""A yes/no question as a modal screen that returns a bool (stop a run, delete a run)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ConfirmModal(ModalScreen[bool]):
    """Ask before something that cannot be undone; Escape or "Cancel" answers False."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "Cancel", id="confirm-cancel", tooltip="Close without doing it"),
        Binding("y", "dismiss(True)", "Yes", show=False, id="confirm-yes", tooltip="Answer yes"),
    ]

    def __init__(self, title: str, body: str, yes: str, *, danger: bool = True, id: str | None = None) -> None:
        super().__init__(id=id, classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.yes = yes
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.body, classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="confirm-no", compact=True)
                yield Button(self.yes, id="confirm-ok", variant="error" if self.danger else "primary", compact=True)

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()  # the safe answer has the focus

    @on(Button.Pressed)
    def _answered(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-ok")
