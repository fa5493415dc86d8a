"""The end of the run's log with errors picked out, under a one-line diagnosis and its fix."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from backend.core.safe_text import visible_lines
from backend.rundir.diagnose import Diagnosis
from tui.feed import LogLine
from tui.safe import plain
from tui.widgets.quiet import show_text

STYLES = {"error": "bold red", "warning": "yellow", "": ""}


def log_text(line: LogLine) -> Text:
    """A log line as written: a tab (accelerate indents its warnings with one) is laid out as a tab, never shown
    as `\\t`; every other control character is shown as its escape."""
    return Text(visible_lines(line.text.replace("\n", " ")), style=STYLES.get(line.level, ""))


class LogTail(Vertical):
    """A diagnosis line (hidden while there is nothing to say) over a scrolling log."""

    DEFAULT_CSS = """
    LogTail {
        height: auto;
        #diagnosis {
            display: none;
            color: $text-error;
            height: auto;
            &.-shown { display: block; }
        }
        RichLog {
            height: 1fr;
            background: $surface;
            overflow-x: hidden;  /* long lines wrap (swift's metric dicts); no horizontal scrollbar */
            /* a tail follows its end: a scrollbar would be sent again in two more frames at every poll
               (~0.7 KB/s over SSH for a live run at 120x36); the wheel and the keys still scroll it */
            scrollbar-visibility: hidden;
        }
    }
    """

    def __init__(self, max_lines: int = 400, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self.diagnosis_text = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="diagnosis", markup=False)
        yield RichLog(max_lines=self.max_lines, wrap=True, markup=False, highlight=False, auto_scroll=True)

    def add_lines(self, lines: Iterable[LogLine]) -> None:
        log = self.query_one(RichLog)
        lines = list(lines)
        for line in lines:  # one scroll for the lot: every scroll repaints the whole tail (bytes over SSH)
            # wrapped at the tail's own width (not the console's; none before the first layout: the log waits)
            log.write(log_text(line), width=log.scrollable_content_region.width or None, scroll_end=False)
        if lines and log.auto_scroll:
            log.scroll_end(animate=False, immediate=True)

    def set_diagnosis(self, diagnosis: Diagnosis | None, fallback: str | None = None) -> None:
        """One line: what went wrong and what to do; `fallback` when the log shows nothing known."""
        if diagnosis is not None:
            text = f"✗ {diagnosis.summary} — {diagnosis.suggestion}"
        else:
            text = fallback or ""
        self.diagnosis_text = text
        widget = self.query_one("#diagnosis", Static)
        show_text(widget, plain(text))  # a summary quotes a log line: its escapes are shown, never sent
        widget.set_class(bool(text), "-shown")
