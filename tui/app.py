"""The Textual app: two modes (launch workspace, runs) and screens pushed on top of them.

Heavy imports never happen here: the app talks to backend/, which starts subprocesses.
Screens are built on first use, so the first frame never waits for a screen it does not show; their
stylesheets are read with the app's, so that the first showing of a screen (F3, the monitor, the chat)
does not parse every stylesheet again and restyle every widget of every open screen (Textual does that
for a screen whose CSS_PATH is new to the app: seconds on a loaded machine, #41).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen

from backend.hardware.machine import HardwareInfo
from tui import collector
from tui.messages import ChatRequested
from tui.safe import shown_as_is
from tui.terminal_gone import exit_when_the_terminal_is_gone
from tui.terminal_pace import TerminalPace
from tui.worker_failures import RETRY_KEY, WorkerFailures, on_screen, start_log

if TYPE_CHECKING:
    from tui.screens.launch import LaunchScreen
    from tui.widgets.alerts_panel import AlertToaster

HERE = Path(__file__).parent
STYLESHEETS: list[str | PurePath] = [HERE / "app.tcss", *sorted((HERE / "screens").glob("*.tcss"))]  # each scoped to its screen's type


class WorkbenchApp(WorkerFailures, App[None]):
    CSS_PATH = STYLESHEETS
    TITLE = "finetune-workbench"
    BINDINGS = [
        Binding("f2", "switch_mode('launch')", "Workspace", id="mode-launch", tooltip="The launch workspace: profile, settings, launch"),
        Binding("f3", "switch_mode('runs')", "Runs", id="mode-runs", tooltip="All runs and their monitors"),
        Binding("f7", "open_queue", "Queue", show=False, id="open-queue", tooltip="The run queue: order, why each waits"),
        Binding("ctrl+q", "quit", "Quit", priority=True, id="quit",
                tooltip="Quit (runs keep going); asks first when the profile has unsaved changes"),
        Binding(RETRY_KEY, "retry_failed", "Retry", id="retry",
                tooltip="Run again what failed on this screen (each failure says so where it happened)"),
    ]

    def __init__(self, profile_path: Path | None, start_mode: str = "launch", *,
                 hardware: HardwareInfo | None = None, refresh_seconds: float | None = None,
                 low_bandwidth: bool = False, alert_seconds: float = 5.0) -> None:
        """`hardware` replaces detection (tests and snapshots pin the machine they describe).
        `refresh_seconds`: the monitor's update interval (None: its default; key i changes it);
        `low_bandwidth`: the monitor draws sparklines instead of braille plots (key b toggles it);
        `alert_seconds`: how often the toaster looks for new alerts of any run."""
        collector.pause_until_first_frame()  # until on_ready (or on_unmount)
        # the first screen is the start mode's own, built as the app composes: no default screen switched away
        # from at mount, which styled the whole new screen a second time before the first frame (Textual reads
        # DEFAULT_MODE, a class variable, in App.__init__: this app's start mode is per instance)
        self.DEFAULT_MODE = start_mode  # type: ignore[misc]
        super().__init__()
        if start_mode != "launch":  # the launch screen installs them as it reads its profile, after its frame
            install_wiring()
        self.profile_path = Path(profile_path) if profile_path is not None else None
        self.start_mode = start_mode
        self.hardware = hardware
        self.refresh_seconds = refresh_seconds
        self.low_bandwidth = low_bandwidth
        self.alert_seconds = alert_seconds
        self.alert_toaster: AlertToaster | None = None  # started after the first frame
        self.launch_screen: LaunchScreen | None = None
        self.first_frame_shown = False
        self.warm_child_started = False  # this app started the warm oracle child (it stops only that one)
        # widgets and screens whose last worker failed, held weakly: a screen popped since is not kept alive
        self.failed_nodes: weakref.WeakSet[WorkerFailures] = weakref.WeakSet()
        self.terminal_pace = TerminalPace(self)  # a terminal that falls behind gets fewer monitor updates (#17)
        self.add_mode("launch", self._make_launch_screen)
        self.add_mode("runs", self._make_runs_screen)

    def _make_launch_screen(self) -> Screen:
        from tui.screens.launch import LaunchScreen

        screen = LaunchScreen(self.profile_path, hardware=self.hardware)
        self.launch_screen = screen
        return self._styled_as_it_mounts(screen)

    def _make_runs_screen(self) -> Screen:
        from tui.screens.runs import RunsScreen

        return self._styled_as_it_mounts(RunsScreen())

    def _styled_as_it_mounts(self, screen: Screen) -> Screen:
        """A mode's new screen gets its styles as its widgets mount (its stylesheet is among the app's): without
        this, Textual (8.x) takes it for a screen that missed a theme change and parses every stylesheet again
        and restyles every widget of every screen, the workspace's hundreds included, at the first F3."""
        screen._css_update_count = self._css_update_count
        return screen

    def on_mount(self) -> None:
        start_log()
        self.terminal_pace.start()
        exit_when_the_terminal_is_gone(self)  # no busy loop on a closed terminal that sent no SIGHUP

    def on_unmount(self) -> None:
        collector.first_frame_drawn()  # the collector back on, had the app ended before its first frame
        if self.warm_child_started:
            from backend.oracle import stop_warm

            stop_warm()  # the warm child ends with the app that started it (it would also end with this process)

    def on_ready(self) -> None:
        """The first frame is on screen: now the app and the launch screen may start their slower work."""
        install_wiring()
        self.first_frame_shown = True
        collector.first_frame_drawn()
        # what the first frame does not show starts now, not beside it (a thread, a child process, imports)
        from backend.oracle import start_warm

        self.warm_child_started = start_warm()  # the library questions of this run share one warm child
        from tui.widgets.alerts_panel import start_alert_toasts

        self.alert_toaster = start_alert_toasts(self, self.alert_seconds)  # a toast for each new alert of any run (#15)
        if self.launch_screen is not None:
            self.launch_screen.after_first_frame()

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast shows its text as written: names, paths and errors in it are never markup."""
        super().notify(shown_as_is(message), title=shown_as_is(title), severity=severity, timeout=timeout,
                       markup=False)

    def action_open_queue(self) -> None:
        from tui.screens.queue import QueueScreen

        if not isinstance(self.screen, QueueScreen):
            self.push_screen(QueueScreen())

    def open_run(self, run_dir: Path) -> None:
        """Show the monitor of one run (from the launch screen after a launch, or the runs list)."""
        from tui.screens.monitor import MonitorScreen

        self.switch_mode("runs")
        self.push_screen(MonitorScreen(Path(run_dir)))

    def on_chat_requested(self, message: ChatRequested) -> None:
        self.open_chat(message.target, message.compare)

    def open_chat(self, target, compare: bool = False) -> None:
        """Chat with a run (its newest checkpoint), a checkpoint or model folder, a lookup or a ModelTarget: the
        screen is shown at once and looks the model up in its worker (it closes, saying why, when there is none)."""
        from tui.screens.chat import ChatScreen

        self.push_screen(ChatScreen(target, compare=compare))

    async def action_quit(self) -> None:
        launch = self.launch_screen
        if launch is None or not launch.is_dirty:
            self.exit()
            return
        launch.confirm_quit(self.exit)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "retry_failed":  # shown (and working) only while something failed on this screen
            return bool(self._failed_here())
        return True

    def show_failure(self, message: str) -> None:
        """The app's own workers (the alert toaster's reads) fail in no widget: the toast and the log say it."""

    def retry(self) -> None:
        if self.alert_toaster is not None:
            self.alert_toaster.start_check()

    def _failed_here(self) -> list[WorkerFailures]:
        return [node for node in self.failed_nodes if node.failed and on_screen(node, self.screen)]

    def action_retry_failed(self) -> None:
        for node in self._failed_here():
            self.failed_nodes.discard(node)
            node.retry_failed()
        self.refresh_bindings()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, binding in zip(("Launch workspace", "Runs"), self.BINDINGS[:2], strict=True):
            assert isinstance(binding, Binding)
            yield SystemCommand(title, f"{binding.tooltip} ({self.get_key_display(binding)})",
                                lambda action=binding.action: self.run_action(action))
        commands = getattr(screen, "system_commands", None)
        if commands is not None:
            yield from commands()


def install_wiring() -> None:
    """The lifecycle floor's lookups and rules, registered with the floors below (once a process; their imports,
    the run folder's and the profile's models among them, are most of the launch screen's own)."""
    from backend.cli.wiring import install

    install()


def run_app(profile_path: Path, refresh_seconds: float | None = None, low_bandwidth: bool = False) -> None:
    app = WorkbenchApp(profile_path=profile_path, refresh_seconds=refresh_seconds, low_bandwidth=low_bandwidth)
    app.run()
    if app.return_code:  # 1: the terminal was hung up (tui/terminal_gone.py)
        raise SystemExit(app.return_code)
