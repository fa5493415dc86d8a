"""The launch workspace: a profile in a form, its problems, the exact command, and Launch.

The screen owns a `ProfileDocument` (tui/profile_document.py) and derives everything else from
it as screen reactives, bound to the widgets that show them: `revision` to the settings form,
`problems` / `plan` to the details pane, and one query each to the widgets that inspect the
model, the datasets and the memory forecast in their own workers. Widgets send messages up
(`SettingsTabs.Changed`, `ModelDetails.Inferred`, `ValidationPanel.JumpTo`); nothing is pushed
into them. Validation and the plan are computed in memory on every change (about 0.1 ms).
Profile files (save, save as, open, diff) are in launch_files.py.

The first frame is the screen's frame (status line, footer, "opening …"): the profile, its models and the
form are read and built right after it (launch_workspace.py), so the app draws at the pace of Textual's
smallest app (#41). Until then the screen's keys are off and `opened` is False.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Button, Static

from backend.hardware.machine import HardwareInfo, detect_hardware
from tui.safe import plain
from tui.screens.launch_files import ProfileFiles
from tui.screens.launch_starts import LaunchStarts
from tui.widgets.memory_line import MemoryLine
from tui.widgets.quiet import QuietFooter, show_text
from tui.worker_failures import WorkerFailures, failure_text

if TYPE_CHECKING:  # imported once the first frame is drawn (tui/screens/launch_workspace.py)
    from backend.launch.command import LaunchPlan
    from backend.launch.validate import Problem
    from backend.profile import LaunchProfile
    from tui.widgets.dataset_details import DataQuery
    from tui.widgets.memory_line import ForecastQuery
    from tui.widgets.model_details import ModelDetails, ModelQuery
    from tui.widgets.settings_tabs import SettingsTabs
    from tui.widgets.swift_report import SwiftDataQuery
    from tui.widgets.validation_panel import ValidationPanel

NARROW_BELOW = 120  # columns: below this the details pane goes under the form


class LaunchScreen(ProfileFiles, LaunchStarts, WorkerFailures, Screen):
    """Pick a model and data, set everything, see the problems and the command, launch."""

    CSS_PATH = "launch.tcss"
    AUTO_FOCUS = "#settings-tabs Tabs"

    BINDINGS = [
        Binding("f5,ctrl+l", "launch", "Launch", id="launch", tooltip="Validate and start this profile as a detached run"),
        Binding("ctrl+s", "save", "Save", id="save", tooltip="Save the profile to its file (atomic)"),
        Binding("ctrl+o", "open", "Open", id="open", tooltip="Open another profile file"),
        Binding("ctrl+n", "save_as", "Save as", id="save-as", tooltip="Save the profile under a new file name"),
        Binding("ctrl+g", "diff", "Diff", id="diff", tooltip="Differences between the form and the saved file"),
        Binding("f4", "import_command", "Import", id="import-command",
                tooltip="Import command…: paste a swift sft/pt command or script as a new profile"),
        Binding("f7", "pick_model", "Model", id="pick-model", tooltip="Choose a model: local, cached, built-in or hub id"),
        Binding("f8", "pick_dataset", "Data", id="pick-dataset", tooltip="Choose a training dataset"),
        Binding("f6", "cycle_details", "Details", id="cycle-details", tooltip="Show problems / command / accelerate config"),
        Binding("ctrl+y", "copy_command", "Copy cmd", id="copy-command",
                tooltip="Copy the exact shell command to the clipboard (OSC 52)"),
        Binding("f9", "save_script", "Script", id="save-script", tooltip="Write the command as an executable .sh"),
        Binding("ctrl+t", "next_group", "Next group", id="next-group", show=False,
                tooltip="Next settings group (Model, Data, Tuner, …)"),
    ]

    revision: var[int] = var(0, init=False)
    """The document's revision (bumped after every change to the profile or its file)."""
    hardware: var[HardwareInfo | None] = var(None, init=False)
    """This machine; None while it is being detected."""
    problems: var[tuple[Problem, ...] | None] = var(None, init=False)
    """What is wrong with the form; None until the hardware is known."""
    plan: var[LaunchPlan | None] = var(None, init=False)
    """What launch would run (built in memory for a preview folder, nothing written)."""
    plan_error: var[str] = var("waiting for hardware detection…", init=False)
    """Why there is no plan."""
    model_query: var[ModelQuery | None] = var(None, init=False)
    data_query: var[DataQuery | None] = var(None, init=False)
    swift_data_query: var[SwiftDataQuery | None] = var(None, init=False)  # #12: swift's own report
    forecast_query: var[ForecastQuery | None] = var(None, init=False)
    suggestions: var[dict[str, tuple[str, ...]]] = var(dict, init=False)
    """Names the model's fields offer while typing (from ms-swift's registry)."""

    class HardwareDetected(Message, bubble=False):
        def __init__(self, hardware: HardwareInfo) -> None:
            super().__init__()
            self.hardware = hardware

    def __init__(self, profile_path: Path | None, *, hardware: HardwareInfo | None = None) -> None:
        # the layout class is known before the first style pass (changing it later restyles every widget)
        super().__init__(id="launch", classes="-narrow" if self.app.size.width < NARROW_BELOW else None)
        self.profile_path = profile_path
        self.set_reactive(LaunchScreen.hardware, hardware)
        self.model_problems: tuple[Problem, ...] = ()  # swift cannot infer model_type / template
        self.opened = False  # the profile read and the form built (right after the first frame)
        self._opening = False

    # ------------------------------------------------------------ what tests and the app read

    @property
    def profile(self) -> LaunchProfile:
        return self.document.profile

    @property
    def form(self) -> SettingsTabs:
        from tui.widgets.settings_tabs import SettingsTabs

        return self.query_one(SettingsTabs)

    @property
    def is_dirty(self) -> bool:
        """The form holds changes not saved (False until the profile is read)."""
        return self.opened and self.document.is_dirty

    # ------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="status-line"):
            yield Static(id="status-profile", markup=False)
            yield Static(id="status-hardware", markup=False)
        with Horizontal(id="workspace"):
            yield Static(plain(f"Opening {self.profile_path or 'the built-in profile'}…"), id="launch-opening",
                         markup=False)
        yield MemoryLine(id="memory-line").data_bind(question=LaunchScreen.forecast_query)  # its row from the start
        yield QuietFooter()

    def on_mount(self) -> None:
        if getattr(self.app, "first_frame_shown", True):  # a later screen: the app's first frame is long drawn
            self.after_first_frame()

    def after_first_frame(self) -> None:
        """Read the profile and build the form (the app calls this once its first frame is drawn)."""
        if not self._opening and self.is_mounted:
            self._opening = True
            self.call_later(self._open)  # in the screen's own turn: it owns the form's bindings

    async def _open(self) -> None:
        """Read the profile and build the form and the details pane (their modules too), then start the workers.
        The app has wired the lifecycle plug-ins by then (tui/app.py: before its frame's work, or at its start)."""
        from tui.profile_document import ProfileDocument
        from tui.screens.launch_workspace import workspace_widgets

        self.document = ProfileDocument.open(self.profile_path)
        form, details = workspace_widgets(self, self.document)
        workspace = self.query_one("#workspace", Horizontal)
        await workspace.query_one("#launch-opening").remove()
        await workspace.mount_all([form, details])
        if not self.is_attached:  # the app quit while the form was being built
            return
        self.opened = True
        self.refresh_bindings()
        tabs = next(iter(self.query(self.AUTO_FOCUS)), None)
        if self.focused is None and tabs is not None:
            self.set_focus(tabs)  # Textual's AUTO_FOCUS found no form at mount
        if self.document.open_problem:
            self.notify(self.document.open_problem, title="Profile not opened", severity="error", timeout=15,
                        markup=False)
        form.after_first_frame()
        if self.hardware is None:
            self._detect_hardware()
        self._follow()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.opened or None  # the keys wait for the form (None: shown dimmed)

    def on_resize(self) -> None:
        narrow = self.app.size.width < NARROW_BELOW
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")

    # ------------------------------------------------------------ what follows from the document

    def changed(self) -> None:
        """The document changed (an edit, a pick, a save, another profile)."""
        self.revision = self.document.revision

    def watch_revision(self) -> None:
        self._follow()

    def watch_hardware(self) -> None:
        self._follow()

    def watch_model_query(self) -> None:
        self.model_problems = ()  # they were about the previous model

    def _follow(self) -> None:
        if not self.opened:
            return
        self._check()
        self._show_status()
        from tui.screens.launch_workspace import queries

        self.model_query, self.data_query, self.swift_data_query, forecast = queries(self.document, self.hardware)
        if forecast is not None:
            self.forecast_query = forecast

    def _check(self) -> None:
        """Validation and the plan, in memory: nothing is written."""
        if self.hardware is None:
            return
        from tui.screens.launch_workspace import check

        self.problems, plan, error = check(self.document, self.hardware, self.model_problems)
        if plan is None:
            self.plan_error = error
        self.plan = plan

    def _show_status(self) -> None:
        if not self.is_mounted or not self.opened:
            return
        from tui.screens.launch_support import hardware_line

        doc = self.document
        dirty = doc.is_dirty
        status = self.query_one("#status-profile", Static)
        show_text(status, plain(f"{doc.profile.name} — {doc.label}{' [example]' if doc.read_only else ''}"
                                f"{' ● modified' if dirty else ''}"))
        status.set_class(dirty, "-dirty")
        failure = self.failure  # a failed worker of the screen (hardware detection, launch) is said here
        show_text(self.query_one("#status-hardware", Static),
                  failure_text(failure) if failure else hardware_line(self.hardware))

    def on_settings_tabs_changed(self, event: SettingsTabs.Changed) -> None:
        self.changed()

    def on_model_details_inferred(self, event: ModelDetails.Inferred) -> None:
        self.model_problems = event.problems
        self.suggestions = event.suggestions
        self._check()

    def set_field(self, path: str, value: object) -> None:
        """Set a field from outside the form (pickers); the form shows it."""
        self.document.set(path, value)
        self.changed()

    def show_field(self, path: str) -> None:
        self.form.show_field(path)

    def on_validation_panel_jump_to(self, event: ValidationPanel.JumpTo) -> None:
        self.show_field(event.field)

    # ------------------------------------------------------------ hardware

    @work(thread=True, exclusive=True, group="hardware", exit_on_error=False, description="Detecting the hardware")
    def _detect_hardware(self) -> None:
        self.post_message(self.HardwareDetected(detect_hardware()))

    @on(HardwareDetected)
    def _hardware_detected(self, event: HardwareDetected) -> None:
        self.hardware = event.hardware

    def show_failure(self, message: str) -> None:
        self._show_status()

    def retry(self) -> None:
        self._show_status()
        if self.hardware is None:
            self._detect_hardware()

    # ------------------------------------------------------------ pickers

    def action_pick_model(self) -> None:
        from tui.modals.model_picker import ModelPickerScreen

        roots = list(dict.fromkeys([Path.cwd(), self.document.base_dir]))
        self.app.push_screen(ModelPickerScreen(self.profile.model.source, roots), self._model_picked)

    def _model_picked(self, source: str | None) -> None:
        if source and source != self.profile.model.source:
            note = self.document.choose_model(source)
            if note:
                self.notify(note)
            self.changed()

    def action_pick_dataset(self) -> None:
        from tui.modals.dataset_picker import DatasetPickerScreen

        current = self.profile.data.train[0] if self.profile.data.train else ""
        base_dir = self.document.base_dir
        self.app.push_screen(DatasetPickerScreen(current, list(dict.fromkeys([Path.cwd(), base_dir])), base_dir),
                             self._dataset_picked)

    def _dataset_picked(self, ref: str | None) -> None:
        if not ref:
            return
        before = self.profile.data.train
        self.set_field("data.train", [ref])
        if len(before) > 1:
            self.notify(f"data.train replaced (was: {' '.join(before)}); edit the field to list several.",
                        markup=False)

    @on(Button.Pressed, "#pick-model-button")
    def _pick_model_pressed(self) -> None:
        self.action_pick_model()

    @on(Button.Pressed, "#pick-dataset-button")
    def _pick_dataset_pressed(self) -> None:
        self.action_pick_dataset()

    # ------------------------------------------------------------ details pane, navigation

    def action_cycle_details(self) -> None:
        from tui.widgets.details_pane import DetailsPane

        self.query_one("#details", DetailsPane).cycle()

    def action_next_group(self) -> None:
        self.form.next_tab()

    # ------------------------------------------------------------ command palette

    def system_commands(self) -> Iterator[SystemCommand]:
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            keys = " / ".join(self.app.get_key_display(replace(binding, key=key.strip()))
                              for key in binding.key.split(","))
            yield SystemCommand(f"{binding.description}", f"{binding.tooltip} ({keys})",
                                lambda action=binding.action: self.run_action(action))
        if not self.opened:
            return
        from tui.profile_fields import TABS

        for tab_id, title, _ in TABS:
            yield SystemCommand(f"Settings: {title}", f"Show the {title} settings",
                                lambda tab=tab_id: self.form.show_tab(tab))
