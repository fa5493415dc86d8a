"""The launch workspace's details pane: the problems of the form, the exact command, the accelerate config.

The screen binds `problems`, `plan` and `plan_error`; the pane binds them on to its three views.
F6 (`cycle`) shows the next tab and focuses it, so arrows and PageUp/PageDown scroll it.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import var
from textual.widgets import TabbedContent, TabPane

from backend.launch.command import LaunchPlan
from backend.launch.validate import Problem
from tui.widgets.command_preview import PlanView
from tui.widgets.validation_panel import ValidationPanel

TABS = {"details-problems": "#validation-list", "details-command": "#command-preview",
        "details-config": "#config-preview"}


class DetailsPane(Vertical):
    """Problems / Command / Config, one tab each."""

    DEFAULT_CSS = """
    DetailsPane {
        TabbedContent, TabbedContent > ContentSwitcher { height: 1fr; }
        TabPane { padding: 0; height: 100%; }
    }
    """

    problems: var[tuple[Problem, ...]] = var((), init=False)
    """Everything wrong with the form right now."""
    plan: var[LaunchPlan | None] = var(None, init=False)
    """What launch would run; None while the form cannot produce one."""
    plan_error: var[str] = var("", init=False)
    """Why there is no plan."""

    def compose(self) -> ComposeResult:
        with TabbedContent(id="details-tabs"):
            with TabPane("Problems", id="details-problems"):
                yield ValidationPanel(id="validation").data_bind(DetailsPane.problems)
            with TabPane("Command", id="details-command"):
                yield PlanView("command", id="command-preview").data_bind(DetailsPane.plan,
                                                                          unavailable=DetailsPane.plan_error)
            with TabPane("Config", id="details-config"):
                yield PlanView("config", id="config-preview").data_bind(DetailsPane.plan,
                                                                        unavailable=DetailsPane.plan_error)

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active

    def show(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def cycle(self) -> None:
        """The next tab, focused."""
        order = list(TABS)
        tabs = self.query_one(TabbedContent)
        tabs.active = order[(order.index(tabs.active) + 1) % len(order)] if tabs.active in order else order[0]
        self.query_one(TABS[tabs.active]).focus()
