"""The run's alerts (from its watchdog's alerts.jsonl): a short list in the monitor, a toast and,
when `[notify] bell = true`, the terminal bell for each alert that arrives while it is open.
`AlertToaster` does the toast and the bell app-wide, for every run, on any screen.

The panel reads the file itself on a slow timer (a stat and, when it grew, the new lines) and
redraws only when an alert arrived, so an idle monitor sends nothing over SSH. Hidden until the
run has an alert. Text from alerts is never parsed as markup.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual.app import App
from textual.message import Message
from textual.widgets import Static

from backend.safe_text import visible
from backend.watch.alerts import Alert, AlertReader, read_alerts

KIND_STYLES = {"finished": "green", "stopped": "yellow", "failed": "bold red", "hang": "bold red",
               "nonfinite": "bold red", "loss_scale": "red", "disk": "red"}
SEVERITY = {"finished": "information", "stopped": "warning"}


class AlertsPanel(Static):
    DEFAULT_CSS = """
    AlertsPanel {
        display: none;
        height: 3;  /* fixed: a panel that grew with each alert re-laid out the screen, ~20 KB over SSH each */
        padding: 0 1;
        border-left: thick $error;
        &.-shown { display: block; }
    }
    """

    class Changed(Message):
        """The run's alerts changed: `steps` are the steps they were raised at (marked on the loss plot)."""

        def __init__(self, steps: tuple[int, ...]) -> None:
            super().__init__()
            self.steps = steps

    def __init__(self, run_dir: Path, *, bell: bool | None = None, shown: int = 2, poll_seconds: float = 2.0,
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
        if getattr(self.app, "alert_toaster", None) is not None:
            return new  # the app-wide toaster toasts and rings for every run, this one included
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
        self.post_message(self.Changed(tuple(sorted({a.step for a in self.alerts if isinstance(a.step, int)}))))
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


class AlertToaster:
    """App-wide: a toast (and the bell where `[notify] bell = true`) for each alert of any run that
    arrives while the app is open, whatever screen is shown. Polls with a stat per run folder."""

    def __init__(self, app: App, interval: float = 5.0) -> None:
        from backend.watch.inbox import run_folders

        self.app = app
        self._folders = run_folders
        self.offsets = {str(folder): _size(folder) for folder in run_folders()}  # what is there already is old
        self._bells: dict[str, bool] = {}
        app.set_interval(interval, self.check)

    def check(self) -> list[Alert]:
        new: list[Alert] = []
        for folder in self._folders():
            key, size = str(folder), _size(folder)
            start = self.offsets.get(key, 0)  # a run started after the app opened: from its first alert
            if size <= start:
                continue
            alerts = read_alerts(folder, offset=start)
            self.offsets[key] = size
            for alert in alerts if not self._shown_on_screen(folder) else ():
                where = f" at step {alert.step}" if alert.step is not None else ""
                self.app.notify(visible(alert.message), title=visible(f"{folder.name}: {alert.kind}{where}"),
                                severity=SEVERITY.get(alert.kind, "error"), timeout=10, markup=False)
            if alerts and self._bells.setdefault(key, _bell_wanted(folder)):
                self.app.bell()
            new += alerts
        return new


    def _shown_on_screen(self, folder: Path) -> bool:
        """The run's monitor is on screen: its alerts panel lists them already, and over SSH a toast
        costs two repaints of the whole screen (it appears, it goes)."""
        feed = getattr(self.app.screen, "feed", None)
        run = getattr(feed, "run", None)
        return run is not None and Path(run.path).resolve() == Path(folder).resolve()


def _size(folder: Path) -> int:
    try:
        return (folder / "alerts.jsonl").stat().st_size
    except OSError:
        return 0


def start_alert_toasts(app: App) -> AlertToaster | None:
    """The app's hook: never lets a failure here keep the TUI from opening."""
    try:
        app.alert_toaster = AlertToaster(app)  # type: ignore[attr-defined]
    except Exception:
        app.alert_toaster = None  # type: ignore[attr-defined]
    return app.alert_toaster  # type: ignore[attr-defined]
