"""One path for a worker that fails: the log, a toast, and the widget that owns it showing the error.

Every widget or screen that starts workers mixes in `WorkerFailures`. Textual sends
`Worker.StateChanged` only to the node that started the worker (it does not bubble), so the
mixin handles it there: the error goes to `tui.log` in the workbench's data folder and to
Textual's log, a toast names what failed, and `show_failure` lets the widget say it in place.
The app keeps the nodes that failed, weakly (a screen closed since is let go); its ctrl+r
("Retry", shown only then) calls `retry_failed` on those of the current screen.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import cast

from rich.text import Text
from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from backend.core.paths import data_dir

RETRY_KEY = "ctrl+r"
# a modal screen hides the app's bindings: a dialog whose workers may fail lists this one itself
RETRY_IN_DIALOG = Binding(RETRY_KEY, "app.retry_failed", "Retry", id="dialog-retry",
                          tooltip="Run again what failed in this dialog")
logger = logging.getLogger("workbench.tui")


def log_path() -> Path:
    return data_dir() / "logs" / "tui.log"


def start_log() -> None:
    """Send the TUI's log records to `tui.log` (once per process)."""
    if any(getattr(h, "workbench", False) for h in logger.handlers):
        return
    try:
        log_path().parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_path(), encoding="utf-8")
    except OSError:
        return  # a read-only home: the toast and the widget still say it
    handler.workbench = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def failure_text(message: str) -> Text:
    """How a widget shows its failure: the message as written, and the key that retries."""
    text = Text("✗ ", style="bold red")
    text.append(message, style="red")
    text.append(f"  ({RETRY_KEY}: retry)", style="dim")
    return text


def on_screen(node: object, screen: object) -> bool:
    """Whether a widget (or the screen itself) is part of `screen` now."""
    try:
        return node is screen or getattr(node, "screen", None) is screen
    except Exception:  # a widget that was removed has no screen
        return False


class WorkerFailures:
    """Mixin for a widget or screen with workers (put it before the Textual base class)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        worker, error = event.worker, event.worker.error
        what = worker.description or worker.name or "a background task"
        message = f"{what} failed: {type(error).__name__}: {error}"
        failures = self.__dict__.setdefault("_worker_failures", {})
        if failures.get(worker.group) == message:
            return  # the same failure again (a timer retrying it): said once is enough
        failures[worker.group] = message
        # the traceback as text: a record holding the exception would hold its frames, and through them
        # the widget or screen, for as long as a handler keeps records
        logger.error("%s (%s)\n%s", message, type(self).__name__, "".join(traceback.format_exception(error)).rstrip())
        node = cast(DOMNode, self)  # a mixin of widgets and screens
        node.log.error(message)
        node.app.notify(f"{message}\n{RETRY_KEY} retries.", title="Something failed", severity="error",
                        timeout=12, markup=False)
        registry = getattr(node.app, "failed_nodes", None)
        if registry is not None:  # the app's ctrl+r retries it
            registry.add(self)
            node.app.refresh_bindings()
        self.show_failure(message)

    @property
    def failed(self) -> bool:
        return bool(self.__dict__.get("_worker_failures"))

    @property
    def failure(self) -> str | None:
        """The last failure not retried yet."""
        failures = self.__dict__.get("_worker_failures") or {}
        return list(failures.values())[-1] if failures else None

    def show_failure(self, message: str) -> None:
        """Say in place that the last attempt failed: a screen says it under its title (widgets override)."""
        if isinstance(self, (Screen, App)):
            titled: Screen | App = self  # not `self.sub_title`: that would declare it on the mixin
            titled.sub_title = f"✗ {message} ({RETRY_KEY}: retry)"

    def retry(self) -> None:
        """Run again what failed (override)."""

    def retry_failed(self) -> None:
        """Forget the failures and try again."""
        self.__dict__.pop("_worker_failures", None)
        self.retry()
