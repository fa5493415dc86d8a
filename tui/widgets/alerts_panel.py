"""The run's alerts (from its watchdog's alerts.jsonl): a short list in the monitor, a toast and,
when `[notify] bell = true`, the terminal bell for each alert that arrives while it is open.

The panel reads the file itself on a slow timer (a stat and, when it grew, the new lines) and
redraws only when an alert arrived, so an idle monitor sends nothing over SSH. Hidden until the
run has an alert. Text from alerts is never parsed as markup.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from backend.safe_text import visible
from backend.watch.alerts import Alert, AlertReader

KIND_STYLES = {"finished": "green", "stopped": "yellow", "failed": "bold red", "hang": "bold red",
               "nonfinite": "bold red", "loss_scale": "red", "disk": "red"}
SEVERITY = {"finished": "information", "stopped": "warning"}


class AlertsPanel(Static):
    DEFAULT_CSS = """
    AlertsPanel {
        display: none;
        height: auto;
        max-height: 7;
        padding: 0 1;
        border-left: thick $error;
        &.-shown { display: block; }
    }
    """

    def __init__(self, run_dir: Path, *, bell: bool | None = None, shown: int = 5, poll_seconds: float = 2.0,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes, markup=False)
        self.run_dir = Path(run_dir)
        self.shown = shown
        self.poll_seconds = poll_seconds
        self.bell = _bell_wanted(self.run_dir) if bell is None else bell
        self.alerts: list[Alert] = []
        self._reader = AlertReader(self.run_dir)

    def on_mount(self) -> None:
        self.alerts = self._reader.read_new()  # what happened before the monitor opened: listed, not rung
        self._render_alerts()
        self.set_interval(self.poll_seconds, self.check)

    def check(self) -> list[Alert]:
        new = self._reader.read_new()
        if not new:
            return []
        self.alerts += new
        self._render_alerts()
        for alert in new:
            self.notify(visible(alert.message), title=f"{alert.kind}" + (f" at step {alert.step}" if alert.step is not None else ""),
                        severity=SEVERITY.get(alert.kind, "error"), timeout=10, markup=False)
        if self.bell:
            self.app.bell()
        return new

    def _render_alerts(self) -> None:
        self.set_class(bool(self.alerts), "-shown")
        if not self.alerts:
            return
        text = Text()
        for number, alert in enumerate(self.alerts[-self.shown:]):
            if number:
                text.append("\n")
            text.append(time.strftime("%H:%M:%S ", time.localtime(alert.time)), style="dim")
            text.append(alert.kind, style=KIND_STYLES.get(alert.kind, "yellow"))
            text.append(f" at step {alert.step}" if alert.step is not None else "")
            text.append(": " + visible(alert.message) + (" (run stopped)" if alert.action == "stop" else ""))
        hidden = len(self.alerts) - self.shown
        if hidden > 0:
            text.append(f"\n… {hidden} earlier (workbench inbox --all)", style="dim")
        self.update(text)


def _bell_wanted(run_dir: Path) -> bool:
    """`[notify] bell` of the run's profile, else of the user's notify.toml."""
    try:
        from backend.profile import load_profile
        from backend.watch.config import effective_notify

        return bool(effective_notify(load_profile(run_dir / "profile.toml").notify).bell)
    except Exception:  # a damaged profile must not break the monitor
        return False
