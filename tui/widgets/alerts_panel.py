"""The run's alerts (from its watchdog's alerts.jsonl): a short list in the monitor, a toast and,
when `[notify] bell = true`, the terminal bell for each alert that arrives while it is open.
`AlertToaster` does the toast and the bell app-wide, for every run, on any screen.

The panel reads the file itself on a slow timer (a stat and, when it grew, the new lines) and
redraws only when an alert arrived, so an idle monitor sends nothing over SSH. Hidden until the
run has an alert. Text from alerts is never parsed as markup.

Timers only start thread workers: the UI thread reads no file on a timer. A read that fails (an
alerts.jsonl that became a folder, a permission taken away) is said where it happened - in the
panel, or by the toaster naming the run - and never ends the app; the other runs are still read.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from rich.text import Text
from textual import on, work
from textual.app import App
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widgets import Static

from backend.contract.alerts import Alert, AlertReader, alerts_path, read_alerts
from backend.core.safe_text import visible
from backend.core.tail import mark
from tui.worker_failures import WorkerFailures, failure_text

KIND_STYLES = {"finished": "green", "stopped": "yellow", "failed": "bold red", "hang": "bold red",
               "nonfinite": "bold red", "loss_scale": "red", "disk": "red"}
RUN_ENDS = ("finished", "stopped")  # alerts that only say how a run ended: one line in the panel
SEVERITY: dict[str, SeverityLevel] = {"finished": "information", "stopped": "warning"}
logger = logging.getLogger("workbench.tui")


class AlertsPanel(WorkerFailures, Static):
    DEFAULT_CSS = """
    AlertsPanel {
        display: none;
        /* 3 lines, fixed: a panel that grew with each alert re-laid out the screen, ~20 KB over SSH each;
           one line for a run that only ended (finished, stopped): its end does not take the plots' rows */
        height: 3;
        padding: 0 1;
        border-left: thick $error;
        &.-shown { display: block; }
        &.-only-the-end { height: 1; }
    }
    """

    class Changed(Message):
        """The run's alerts changed: `steps` are the steps they were raised at (marked on the loss plot)."""

        def __init__(self, steps: tuple[int, ...]) -> None:
            super().__init__()
            self.steps = steps

    @dataclass
    class Read(Message, bubble=False):
        """What a worker read: the new alerts, and whether they are the ones from before the monitor opened."""

        alerts: list[Alert]
        old: bool

    def __init__(self, run_dir: Path, *, bell: bool | None = None, shown: int = 2, poll_seconds: float = 2.0,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes, markup=False)
        self.run_dir = Path(run_dir)
        self.shown = shown
        self.poll_seconds = poll_seconds
        self.bell = bell  # None: the run's profile says, read (off the UI thread) once an alert is found
        self.alerts: list[Alert] = []
        self._reader = AlertReader(self.run_dir)
        self._reading = threading.Lock()  # one read at a time: the reader keeps an offset

    def on_mount(self) -> None:
        # What the file held when the monitor opened is old (listed, not rung); one stat here, so an alert
        # that lands before the first worker runs is still rung.
        self._read(old_upto=_size(self.run_dir))
        self.set_interval(self.poll_seconds, self._read)

    @work(thread=True, group="alerts-read", exit_on_error=False, description="Reading the run's alerts")
    def _read(self, old_upto: int | None = None) -> None:
        with self._reading:
            old = self._read_new(upto=old_upto) if old_upto is not None else None
            damaged = self._reader.damaged
            alerts = self._read_new()
            damaged = self._reader.damaged != damaged  # in what came after: the old ones' read shows its own
        if old is not None:
            self.post_message(self.Read(old, True))
        if alerts or damaged:
            self.post_message(self.Read(alerts, False))

    @on(Read)
    def _read_arrived(self, message: Read) -> None:
        if message.old or not message.alerts:  # the old ones, or only damaged lines: listed, not rung
            self.alerts = message.alerts + self.alerts
            self._render_alerts()
        else:
            self._take(message.alerts)

    def check(self) -> list[Alert]:
        """Read now, on the caller's thread, and show what is new (the timer does this in a worker)."""
        with self._reading:
            new = self._read_new()
        return self._take(new)

    def _read_new(self, upto: int | None = None) -> list[Alert]:
        alerts = self._reader.read_new(upto)
        if alerts and self.bell is None:
            self.bell = _bell_wanted(self.run_dir)
        return alerts

    def show_failure(self, message: str) -> None:
        self.set_class(True, "-shown")
        self._fit(False)
        self.update(failure_text(message))

    def retry(self) -> None:
        self._render_alerts()
        self._read()

    def _take(self, new: list[Alert]) -> list[Alert]:
        if not new:
            return []
        self.alerts += new
        self._render_alerts()
        if _toaster_of(self.app) is not None:
            return new  # the app-wide toaster toasts and rings for every run, this one included
        for alert in new:
            self.notify(visible(alert.message), title=f"{alert.kind}" + (f" at step {alert.step}" if alert.step is not None else ""),
                        severity=SEVERITY.get(alert.kind, "error"), timeout=10, markup=False)
        if self.bell:
            self.app.bell()
        return new

    def _render_alerts(self) -> None:
        damaged = self._reader.damaged
        self.set_class(bool(self.alerts or damaged), "-shown")
        if not self.alerts:
            if damaged:
                self._fit(False)
                self.update(self._damaged_text())
            return
        self.post_message(self.Changed(tuple(sorted({a.step for a in self.alerts if isinstance(a.step, int)}))))
        text = Text()
        for number, alert in enumerate(self.alerts[-self.shown:]):
            if number:
                text.append("\n")
            text.append(time.strftime("%H:%M:%S ", time.localtime(alert.time)), style="dim")
            text.append_text(alert_line(alert))
        hidden = len(self.alerts) - self.shown
        if hidden > 0:
            text.append(f"\n… {hidden} earlier (workbench inbox --all)", style="dim")
        if damaged:  # on the last line: the panel is 3 lines high at most
            text.append("\n" if hidden <= 0 else " · ")
            text.append_text(self._damaged_text())
        self._fit(len(text.plain.split("\n")) == 1 and all(a.kind in RUN_ENDS for a in self.alerts))
        self.update(text)

    def _fit(self, one_line: bool) -> None:
        """One line for a run's end alone, else three."""
        self.set_class(one_line, "-only-the-end")

    def _damaged_text(self) -> Text:
        count = self._reader.damaged
        lines = "1 damaged line" if count == 1 else f"{count} damaged lines"
        return Text(f"⚠ {lines} of alerts.jsonl skipped ({visible(self._reader.damaged_why, limit=60)})",
                    style="yellow")


def alert_line(alert: Alert) -> Text:
    """`kind at step N: message`, the kind coloured; a message that already starts so ("finished at step 318 in
    2m") is not said twice."""
    head = alert.kind + (f" at step {alert.step}" if alert.step is not None else "")
    message = visible(alert.message)
    rest = message[len(head):] if message.startswith(head) else ": " + message
    line = Text(alert.kind, style=KIND_STYLES.get(alert.kind, "yellow"))
    line.append(head[len(alert.kind):] + rest + (" (run stopped)" if alert.action == "stop" else ""))
    return line


def _bell_wanted(run_dir: Path) -> bool:
    """`[notify] bell` of the run's profile, else of the user's notify.toml."""
    try:
        from backend.profile import load_profile
        from backend.watch.config import effective_notify

        return bool(effective_notify(load_profile(run_dir / "profile.toml").notify).bell)
    except Exception:  # a damaged profile must not break the monitor
        return False


@dataclass
class Found:
    """What one read of every run's alerts found: the new alerts by run folder, and one line per run
    whose alerts could not be read (the other runs were read all the same)."""

    alerts: dict[Path, list[Alert]] = field(default_factory=dict)
    problems: dict[Path, str] = field(default_factory=dict)
    bells: set[Path] = field(default_factory=set)  # runs whose [notify] bell is on


class AlertToaster:
    """App-wide: a toast (and the bell where `[notify] bell = true`) for each alert of any run that
    arrives while the app is open, whatever screen is shown. Every `interval` seconds a thread
    worker stats each run's alerts file and reads those that grew; the UI thread only shows."""

    def __init__(self, app: App, interval: float = 5.0) -> None:
        self.app = app
        self.offsets: dict[Path, int] | None = None  # None until the first read: what is there then is old
        self._bells: dict[Path, bool] = {}
        self._said: dict[Path, str] = {}  # each run's problem, said once
        self._reading = threading.Lock()
        app.set_interval(interval, self.start_check)
        self.start_check()

    def start_check(self) -> None:
        """The timer's whole work: start a worker (the app's ctrl+r does this too after a failure)."""
        self.app.run_worker(self._check_in_thread, thread=True, group="alert-toasts", exit_on_error=False,
                            description="Reading the runs' alerts")

    def _check_in_thread(self) -> None:
        found = self.read_new()
        if found.alerts or found.problems:
            self.app.call_from_thread(self.show, found)

    def check(self) -> list[Alert]:
        """Read and show now, on the caller's thread (tests; the timer reads in a worker)."""
        return self.show(self.read_new())

    def read_new(self) -> Found:
        """File I/O only (any thread): the alerts that arrived since the last read. A run whose read
        fails keeps its offset (tried again next time) and is named in `problems`."""
        from backend.watch.inbox import run_folders

        if not self._reading.acquire(blocking=False):
            return Found()  # a read is under way (a slow disk): this tick is skipped
        try:
            folders = run_folders()
            if self.offsets is None:
                self.offsets = {folder: _size(folder) for folder in folders}
                return Found()
            found = Found()
            for folder in folders:
                try:
                    self._read_folder(folder, found)
                except Exception as err:  # one damaged run folder never hides the others' alerts
                    found.problems[folder] = f"{type(err).__name__}: {err}"
            return found
        finally:
            self._reading.release()

    def _read_folder(self, folder: Path, found: Found) -> None:
        assert self.offsets is not None
        size, start = _size(folder), self.offsets.get(folder, 0)  # a run started after the app opened: all of it
        if size <= start:
            return
        alerts = read_alerts(folder, offset=start)
        self.offsets[folder] = size
        if alerts:
            found.alerts[folder] = alerts
            if self._bells.setdefault(folder, _bell_wanted(folder)):
                found.bells.add(folder)

    def show(self, found: Found) -> list[Alert]:
        """On the UI thread: a toast per new alert (not for the run whose monitor is on screen), the bell,
        and once per run a warning for a run whose alerts cannot be read."""
        new: list[Alert] = []
        for folder, alerts in found.alerts.items():
            for alert in alerts if not self._shown_on_screen(folder) else ():
                where = f" at step {alert.step}" if alert.step is not None else ""
                self.app.notify(visible(alert.message), title=visible(f"{folder.name}: {alert.kind}{where}"),
                                severity=SEVERITY.get(alert.kind, "error"), timeout=10, markup=False)
            new += alerts
        if found.bells:
            self.app.bell()
        for folder, problem in found.problems.items():
            if self._said.get(folder) != problem:
                self._said[folder] = problem
                logger.warning("alerts of %s cannot be read: %s", folder, problem)
                self.app.notify(visible(f"{alerts_path(folder)}: {problem}"), title=visible(
                    f"{folder.name}: its alerts cannot be read"), severity="warning", timeout=12, markup=False)
        return new

    def _shown_on_screen(self, folder: Path) -> bool:
        """The run's monitor is on screen: its alerts panel lists them already, and over SSH a toast
        costs two repaints of the whole screen (it appears, it goes)."""
        feed = getattr(self.app.screen, "feed", None)
        run = getattr(feed, "run", None)
        return run is not None and Path(run.path).resolve() == Path(folder).resolve()


def _size(folder: Path) -> int:
    found = mark(alerts_path(folder))  # the one "changed?" check (backend/core/tail.py)
    return found.size if found is not None else 0


@runtime_checkable
class _ToastingApp(Protocol):
    """An app that keeps the toaster (the workbench app's typed attribute; test apps may have none)."""

    alert_toaster: AlertToaster | None


def _toaster_of(app: App) -> AlertToaster | None:
    return app.alert_toaster if isinstance(app, _ToastingApp) else None


def start_alert_toasts(app: App, interval: float = 5.0) -> AlertToaster | None:
    """The app's hook: never lets a failure here keep the TUI from opening."""
    try:
        return AlertToaster(app, interval)
    except Exception:
        logger.exception("the alert toasts could not start")
        return None
