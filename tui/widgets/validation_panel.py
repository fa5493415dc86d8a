"""The pre-launch problems of the profile in the form, live: each names its field and the fix.

The screen sets `problems` (backend.launch.validate's list plus the fields whose typed value was
refused); choosing a problem posts `ValidationPanel.JumpTo` so the screen can focus its field.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import var
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from backend.launch.validate import Problem
from tui.safe import shown_as_is


class ValidationPanel(Vertical):
    """Summary line plus one selectable entry per problem, errors first."""

    DEFAULT_CSS = """
    ValidationPanel {
        height: 100%;
        #validation-summary { height: auto; padding: 0 1; color: $success; }
        &.-errors #validation-summary { color: $error; text-style: bold; }
        #validation-list { height: 1fr; border: none; padding: 0; }
    }
    """

    problems: var[tuple[Problem, ...] | None] = var(None, init=False, always_update=True)
    """Everything wrong with the form right now (errors block a launch); None: not checked yet."""

    class JumpTo(Message):
        """The user chose a problem: show its field."""

        def __init__(self, field: str) -> None:
            super().__init__()
            self.field = field

    def compose(self) -> ComposeResult:
        yield Static("checking…", id="validation-summary")
        yield OptionList(id="validation-list")

    @property
    def error_count(self) -> int:
        return sum(1 for p in self.problems or () if p.severity == "error")

    @property
    def summary(self) -> str:
        errors = self.error_count
        warnings = len(self.problems or ()) - errors
        if not self.problems:
            return "✓ No problems: ready to launch."
        parts = [f"{errors} error{'s' * (errors != 1)}" if errors else "", f"{warnings} warning{'s' * (warnings != 1)}"
                 if warnings else ""]
        verdict = "launch refused until errors are fixed" if errors else "launch allowed"
        return f"{' and '.join(p for p in parts if p)}: {verdict}."

    def watch_problems(self) -> None:
        if self.problems is None:
            self.query_one("#validation-summary", Static).update("checking…")
            return
        self.query_one("#validation-summary", Static).update(self.summary)
        self.set_class(self.error_count > 0, "-errors")
        options = self.query_one("#validation-list", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        options.add_options([Option(self._render_problem(p), id=f"{i}:{p.field}") for i, p in enumerate(self.problems)])
        if self.problems:  # Enter works at once: the first (or the same) problem is highlighted
            options.highlighted = min(highlighted or 0, len(self.problems) - 1)

    @staticmethod
    def _render_problem(problem: Problem) -> Text:
        error = problem.severity == "error"
        text = Text()
        text.append("✗ " if error else "! ", style="bold red" if error else "bold yellow")
        text.append(shown_as_is(problem.field), style="bold")
        text.append(f"  {shown_as_is(problem.message)}\n")
        text.append("  fix: ", style="dim")
        text.append(shown_as_is(problem.fix), style="italic")
        return text

    def lines(self) -> list[str]:
        """Plain text of each problem (for tests and the tmux check)."""
        return [f"{p.severity}: {p.field}: {p.message} fix: {p.fix}" for p in self.problems or ()]

    @on(OptionList.OptionSelected, "#validation-list")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.JumpTo(event.option.id.split(":", 1)[1]))
