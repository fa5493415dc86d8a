"""The golden prompts' per-prompt view (key g in the monitor's scoreboard): the same lines as
`workbench checkpoints RUN --golden` (backend/golden/answers.py's view_lines), read from the run folder by the
caller. Text from the answers is never markup; control characters are shown escaped. Escape closes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from backend.core.safe_text import visible, visible_lines


class GoldenScreen(ModalScreen[None]):
    """The answers to each golden prompt, base model first, then checkpoint by checkpoint."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Close", id="golden-close", tooltip="Close the golden answers"),
        Binding("g", "dismiss(None)", "Close", show=False, id="golden-close-g", tooltip="Close the golden answers"),
    ]
    DEFAULT_CSS = """
    GoldenScreen #golden-scroll {
        height: auto;
        max-height: 40;
    }
    """

    def __init__(self, title: str, lines: list[str], *, id: str | None = "golden-view") -> None:
        super().__init__(id=id, classes="dialog-screen")
        self.title_text, self.lines = title, lines

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label(Text(visible(self.title_text)), classes="dialog-title")
            with VerticalScroll(id="golden-scroll"):
                yield Static(Text(visible_lines("\n".join(self.lines))), id="golden-text", markup=False)
            yield Static("escape: close · ↑↓ PgUp PgDn: scroll", classes="dialog-hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#golden-scroll", VerticalScroll).focus()
