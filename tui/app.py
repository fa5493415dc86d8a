"""The Textual app: two modes (launch workspace, runs) and screens pushed on top of them.

Heavy imports never happen here: the app talks to backend/, which starts subprocesses.
Screens are built on first use, so the first frame never waits for a screen it does not show.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from backend.hardware import HardwareInfo


class PlaceholderScreen(Screen):
    """Stands in for a screen of a later part (runs list, monitor) that is not installed."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.text, id="placeholder", markup=False)
        yield Footer()


class WorkbenchApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "finetune-workbench"
    BINDINGS = [
        Binding("f2", "switch_mode('launch')", "Workspace", id="mode-launch", tooltip="The launch workspace: profile, settings, launch"),
        Binding("f3", "switch_mode('runs')", "Runs", id="mode-runs", tooltip="All runs and their monitors"),
        Binding("ctrl+q", "quit", "Quit", priority=True, id="quit",
                tooltip="Quit (runs keep going); asks first when the profile has unsaved changes"),
    ]

    def __init__(self, profile_path: Path | None, start_mode: str = "launch", *,
                 hardware: HardwareInfo | None = None) -> None:
        """`hardware` replaces detection (tests and snapshots pin the machine they describe)."""
        super().__init__()
        self.profile_path = Path(profile_path) if profile_path is not None else None
        self.start_mode = start_mode
        self.hardware = hardware
        self.launch_screen = None
        self.first_frame_shown = False
        self._modes.update({"launch": self._make_launch_screen, "runs": self._make_runs_screen})

    def _make_launch_screen(self) -> Screen:
        from tui.screens.launch import LaunchScreen

        self.launch_screen = LaunchScreen(self.profile_path, hardware=self.hardware)
        return self.launch_screen

    def _make_runs_screen(self) -> Screen:
        try:
            from tui.screens.runs import RunsScreen
        except ModuleNotFoundError as err:
            if err.name != "tui.screens.runs":
                raise
            return PlaceholderScreen("The runs list is not installed in this build (TUI part 2).")
        return RunsScreen()

    def on_mount(self) -> None:
        self.switch_mode(self.start_mode)

    def on_ready(self) -> None:
        """The first frame is on screen: now the launch screen may start its slower work."""
        self.first_frame_shown = True
        if self.launch_screen is not None:
            self.launch_screen.after_first_frame()

    def open_run(self, run_dir: Path) -> None:
        """Show the monitor of one run (from the launch screen after a launch, or the runs list)."""
        try:
            from tui.screens.monitor import MonitorScreen
        except ModuleNotFoundError as err:
            if err.name != "tui.screens.monitor":
                raise
            self.notify(f"Run folder: {run_dir}\nThe monitor is not installed in this build; "
                        f"`workbench status` shows the run.", title="Run started", timeout=15)
            return
        self.switch_mode("runs")
        self.push_screen(MonitorScreen(Path(run_dir)))

    def open_chat(self, target, compare: bool = False) -> None:
        """Chat with a run (its newest checkpoint), a checkpoint or model folder, or a ModelTarget."""
        from backend.jobs.targets import TargetError
        from tui.screens.chat import ChatScreen

        try:
            screen = ChatScreen(target, compare=compare)
        except TargetError as err:
            self.notify(str(err), title="Cannot open the chat", severity="error", timeout=15)
            return
        self.push_screen(screen)

    async def action_quit(self) -> None:
        launch = self.launch_screen
        if launch is None or not launch.is_dirty:
            self.exit()
            return
        from tui.widgets.dialogs import ConfirmScreen

        name = launch.profile.name
        choices = [("Save and quit", "save", "primary"), ("Quit without saving", "discard", "error"),
                   ("Cancel", "cancel", "default")]
        self.push_screen(ConfirmScreen("Unsaved changes", f"Profile '{name}' has changes that are not saved.\n"
                                       "Runs already started keep going either way.", choices, id="confirm-quit"),
                         self._quit_answered)

    def _quit_answered(self, answer: str | None) -> None:
        launch = self.launch_screen
        if answer == "discard":
            self.exit()
        elif answer == "save" and launch is not None:
            if launch.profile_path is None or launch.read_only:
                self.switch_mode("launch")
                launch.action_save_as()  # quitting waits for a name; ctrl+q again afterwards
            elif launch.save_to(launch.profile_path):
                self.exit()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Launch workspace", "Profile, settings and launch [f2]", lambda: self.switch_mode("launch"))
        yield SystemCommand("Runs", "All runs and their monitors [f3]", lambda: self.switch_mode("runs"))
        commands = getattr(screen, "system_commands", None)
        if commands is not None:
            yield from commands()


def run_app(profile_path: Path) -> None:
    WorkbenchApp(profile_path=profile_path).run()
