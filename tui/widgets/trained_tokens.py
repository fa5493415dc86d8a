"""The trained-token view: one dataset row exactly as swift's template renders it.

Tokens whose loss counts (labels != -100) are highlighted, the system/user/tool parts and the
template's scaffolding are dimmed, special tokens stand out and the `max_length` cut is marked.
The answer comes from the `swift_data` oracle (backend/data/swift_view.py); the text is built by
backend/data/view.py, the same text `workbench data show` prints. Data is never parsed as markup.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from backend.data.view import row_text


class TrainedTokenView(Static):
    """Shows `answer` (an `ask_row` answer); `note` while it is being asked."""

    DEFAULT_CSS = """
    TrainedTokenView {
        height: auto;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $primary-darken-2;
    }
    """

    answer: var[dict[str, Any] | None] = var(None, init=False)
    """The row as swift renders it (segments with trained/special/lost flags)."""
    note: var[str] = var("", init=False)
    """What is happening (asking swift…), shown when there is no answer yet."""

    def watch_answer(self) -> None:
        self._show()

    def watch_note(self) -> None:
        self._show()

    def on_mount(self) -> None:
        self._show()

    def _show(self) -> None:
        if self.answer is not None:
            text = row_text(self.answer)
            text.rstrip()
            self.update(text)
        else:
            self.update(Text(self.note, style="dim"))
