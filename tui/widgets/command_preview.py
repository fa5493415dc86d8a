"""What launch will run: the exact command (one option group per line) and the accelerate config.

The details pane binds `plan` (built in memory for a preview run folder, nothing written); the
text shown is `plan.shell_line()` split at option boundaries with `\\` continuations.
"""

from __future__ import annotations

import json
from typing import Literal

from textual.containers import VerticalScroll
from textual.reactive import var
from textual.widgets import Static

from backend.launch.command import LaunchPlan
from tui.command_text import multiline_command


class PlanView(VerticalScroll, can_focus=True):
    """A scrollable, focusable view of one face of the launch plan."""

    DEFAULT_CSS = """
    PlanView {
        height: 100%;
        padding: 0 1;
    }
    """

    plan: var[LaunchPlan | None] = var(None, init=False)
    """The plan on show; None while the form cannot produce one."""
    unavailable: var[str] = var("", init=False)
    """Why there is no plan (shown instead of it)."""

    def __init__(self, face: Literal["command", "config"], *, id: str | None = None) -> None:
        super().__init__(id=id, classes="plan-view")
        self.face = face

    def compose(self):
        yield Static("waiting for hardware detection…", classes="plan-text", markup=False)

    @property
    def text(self) -> str:
        if self.plan is None:
            return self.unavailable
        if self.face == "command":
            return multiline_command(self.plan)
        text = f"# {self.plan.accelerate_config_path.name}\n{self.plan.accelerate_yaml()}"
        if self.plan.deepspeed_config is not None and self.plan.deepspeed_config_path is not None:
            text += f"\n# {self.plan.deepspeed_config_path.name}\n{json.dumps(self.plan.deepspeed_config, indent=2)}\n"
        return text

    def watch_plan(self) -> None:
        self.query_one(".plan-text", Static).update(self.text)

    def watch_unavailable(self) -> None:
        self.query_one(".plan-text", Static).update(self.text)
