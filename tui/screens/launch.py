"""The launch workspace: a profile in a form, its problems, the exact command, and Launch.

The screen owns the `LaunchProfile` being edited. Editors post `FieldEditor.Edited` upward;
the screen assigns the value (pydantic validates) and pushes the consequences downward as
attributes: problems to the validation panel and to the fields, the plan to the previews,
the forecast to the memory line. Validation and the plan are computed in memory on every
change (about 0.1 ms); model details, dataset scans and the memory forecast run in workers.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, Footer, Static, TabbedContent, TabPane

from backend.command import LaunchPlan, build_launch
from backend.hardware import HardwareInfo, detect_hardware
from backend.inspect_data import DatasetReport, has_local_tokenizer, parse_ref, scan_dataset, token_summary
from backend.models import ModelInfo, SwiftInference, describe_source, infer_swift_types, load_swift_registry
from backend.paths import SHIPPED_PROFILES_DIR, is_builtin, looks_local
from backend.profile import LaunchProfile, ModelSection, ProfileError, load_profile, profile_to_toml, save_profile
from backend.runs.layout import preview_dir
from backend.validate import Problem, errors, validate
from tui.messages import RunLaunched
from tui.command_text import display_path, launch_script, write_executable_atomic
from tui.widgets.command_preview import PlanView
from tui.widgets.dataset_picker import DatasetPickerScreen, DatasetSummary
from tui.widgets.dialogs import ConfirmScreen, PathPromptScreen, TextScreen
from tui.widgets.memory_line import MemoryLine, forecast_summary
from tui.widgets.model_picker import ModelDetails, ModelPickerScreen
from tui.screens.launch_support import (
    BUILTIN_TYPES,
    NARROW_BELOW,
    TABS,
    check_profile,
    distribution_support,
    field_of,
    first_message,
    hardware_line,
    is_visible,
    looks_like_profile,
    model_dir_of,
    precision_support,
    profile_label,
    rebase_ref,
    swift_type_problems,
    tab_paths,
    visible_rules,
)
from tui.widgets.settings_form import FieldEditor, SectionHeading, field_spec, get_value, set_value
from tui.widgets.validation_panel import ValidationPanel

class LaunchScreen(Screen):
    """Pick a model and data, set everything, see the problems and the command, launch."""

    CSS_PATH = "launch.tcss"
    AUTO_FOCUS = "#settings Tabs"

    BINDINGS = [
        Binding("f5,ctrl+l", "launch", "Launch", id="launch", tooltip="Validate and start this profile as a detached run"),
        Binding("ctrl+s", "save", "Save", id="save", tooltip="Save the profile to its file (atomic)"),
        Binding("ctrl+o", "open", "Open", id="open", tooltip="Open another profile file"),
        Binding("ctrl+n", "save_as", "Save as", id="save-as", tooltip="Save the profile under a new file name"),
        Binding("ctrl+g", "diff", "Diff", id="diff", tooltip="Differences between the form and the saved file"),
        Binding("f7", "pick_model", "Model", id="pick-model", tooltip="Choose a model: local, cached, built-in or hub id"),
        Binding("f8", "pick_dataset", "Data", id="pick-dataset", tooltip="Choose a training dataset"),
        Binding("f6", "cycle_details", "Details", id="cycle-details", tooltip="Show problems / command / accelerate config"),
        Binding("ctrl+y", "copy_command", "Copy cmd", id="copy-command",
                tooltip="Copy the exact shell command to the clipboard (OSC 52)"),
        Binding("f9", "save_script", "Script", id="save-script", tooltip="Write the command as an executable .sh"),
        Binding("ctrl+t", "next_group", "Next group", id="next-group", show=False,
                tooltip="Next settings group (Model, Data, Tuner, …)"),
    ]

    def __init__(self, profile_path: Path | None, *, hardware: HardwareInfo | None = None) -> None:
        # the layout class is known before the first style pass (changing it later restyles every widget)
        super().__init__(id="launch", classes="-narrow" if self.app.size.width < NARROW_BELOW else None)
        self.hardware = hardware
        self.profile_path: Path | None = None
        self.open_problem: str | None = None
        self.profile = LaunchProfile()
        # what the form is compared with for "unsaved changes": the file, or the blank form
        self.saved_text = profile_to_toml(self.profile)
        if profile_path is not None and not Path(profile_path).exists():
            # a new profile that ctrl+s will create at that path
            self.profile = LaunchProfile(name=Path(profile_path).stem or "untitled")
            self.profile_path = Path(profile_path).resolve()
            self.saved_text = profile_to_toml(self.profile)
        elif profile_path is not None:
            try:
                self._adopt(load_profile(profile_path), Path(profile_path))
            except ProfileError as err:  # the broken file is left alone: saving asks for a name
                self.open_problem = str(err)
        self.editors: dict[str, FieldEditor] = {}
        self.problems: list[Problem] = []
        self.plan: LaunchPlan | None = None
        self.model_info: ModelInfo | None = None
        self.model_problems: list[Problem] = []  # swift could not infer model_type / template
        self._scan_stop = threading.Event()
        self._unmounted_tabs: dict[str, list[Widget]] = {}
        self._started = False  # workers and hidden tabs start after the first frame
        # widgets the screen updates directly (their tabs may not be mounted yet)
        self.model_details = ModelDetails(id="model-details", classes="tab-info")
        self.dataset_summary = DatasetSummary(id="dataset-summary", classes="tab-info")
        self.precision_info = Static(precision_support(hardware), id="precision-support", classes="tab-info",
                                     markup=False)
        self.distribution_info = Static(id="distribution-support", classes="tab-info", markup=False)

    # ------------------------------------------------------------ state

    def _adopt(self, profile: LaunchProfile, path: Path | None) -> None:
        self.profile = profile
        self.profile_path = path.resolve() if path else None
        self.saved_text = profile_to_toml(profile) if path else ""

    @property
    def base_dir(self) -> Path:
        """Relative paths in the profile are relative to its file's folder."""
        return self.profile_path.parent if self.profile_path else Path.cwd()

    @property
    def read_only(self) -> bool:
        """Shipped profiles are examples: saving one asks for a new name."""
        return self.profile_path is not None and self.profile_path.is_relative_to(SHIPPED_PROFILES_DIR.resolve())

    @property
    def invalid_fields(self) -> dict[str, str]:
        return {path: editor.error for path, editor in self.editors.items() if editor.error is not None}

    @property
    def is_dirty(self) -> bool:
        return profile_to_toml(self.profile) != self.saved_text or bool(self.invalid_fields)

    # ------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="status-line"):
            yield Static(id="status-profile", markup=False)
            yield Static(id="status-hardware", markup=False)
        with Horizontal(id="workspace"):
            with TabbedContent(id="settings"):
                for index, (tab_id, title, sections) in enumerate(TABS):
                    with TabPane(title, id=f"tab-{tab_id}"):
                        with VerticalScroll(id=f"scroll-{tab_id}", classes="settings-scroll", can_focus=False):
                            content = list(self._compose_tab(tab_id, sections))
                            if index == 0:
                                yield from content
                            else:  # hidden tabs are filled after the first frame
                                self._unmounted_tabs[tab_id] = content
            with TabbedContent(id="details"):
                with TabPane("Problems", id="details-problems"):
                    yield ValidationPanel(id="validation")
                with TabPane("Command", id="details-command"):
                    yield PlanView("command", id="command-preview")
                with TabPane("Config", id="details-config"):
                    yield PlanView("config", id="config-preview")
        yield MemoryLine(id="memory-line")
        yield Footer()

    def _compose_tab(self, tab_id: str, sections: list[str]) -> ComposeResult:
        if tab_id == "precision":
            yield self.precision_info
        if tab_id == "distribution":
            yield self.distribution_info
        for item in tab_paths(sections):
            if isinstance(item, tuple):
                yield SectionHeading(item[1].rsplit(".", 1)[-1].upper(), id=f"heading-{item[1].replace('.', '-')}",
                                     classes="section-heading")
                continue
            button = {"model.source": ("Pick… F7", "pick-model-button"),
                      "data.train": ("Pick… F8", "pick-dataset-button")}.get(item)
            editor = FieldEditor(field_spec(item), get_value(self.profile, item), button=button)
            self.editors[item] = editor
            yield editor
            if item == "model.source":
                yield self.model_details
            if item == "data.train":
                yield self.dataset_summary

    def on_mount(self) -> None:
        if self.open_problem:
            self.notify(self.open_problem, title="Profile not opened", severity="error", timeout=15)
        self._refresh_checks()
        self._refresh_status()
        # everything slow starts once the first frame is on screen (the app calls after_first_frame)
        if getattr(self.app, "first_frame_shown", True):
            self.call_after_refresh(self.after_first_frame)

    def after_first_frame(self) -> None:
        """Start the workers and mount the hidden tabs (called once the first frame is drawn)."""
        if self._started or not self.is_mounted:
            return
        self._started = True
        if self.hardware is None:
            self._detect_hardware()
        self.profile_changed(None)
        self._mount_hidden_tabs()

    def _mount_hidden_tabs(self) -> None:
        for tab_id in list(self._unmounted_tabs):
            self._mount_tab(tab_id)

    def _mount_tab(self, tab_id: str) -> None:
        content = self._unmounted_tabs.pop(tab_id, None)
        if content and self.is_attached and not self.app._exit:  # not while the app is closing
            self.query_one(f"#scroll-{tab_id}", VerticalScroll).mount_all(content)

    @on(TabbedContent.TabActivated, "#settings")
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._mount_tab((event.pane.id or "").removeprefix("tab-"))

    def on_resize(self) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        narrow = self.app.size.width < NARROW_BELOW
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")

    # ------------------------------------------------------------ editing

    @on(FieldEditor.Edited)
    def _edited(self, event: FieldEditor.Edited) -> None:
        editor = event.editor
        try:
            set_value(self.profile, editor.path, event.value)
        except ValidationError as err:
            editor.error = first_message(err)
        else:
            editor.error = None
        self.profile_changed(editor.path)

    def set_field(self, path: str, value: object) -> None:
        """Set a field from outside the form (pickers); the editor shows it."""
        set_value(self.profile, path, value)
        if path in self.editors:
            self.editors[path].show_value(get_value(self.profile, path))
        self.profile_changed(path)

    def profile_changed(self, path: str | None = None) -> None:
        """Recompute everything that follows from the profile (path None = all of it)."""
        self._refresh_visibility()
        self._refresh_checks()
        self._refresh_status()
        self.distribution_info.update(distribution_support(self.hardware, self.profile))
        if path in (None, "model.source"):
            self.model_problems = []  # they were about the previous model
        if path is None or path.startswith("model."):
            self._describe_model(self.profile.model.model_copy(), self.base_dir)
        if path is None or path.startswith(("data.", "model.source", "training.max_length")):
            self._start_dataset_scan()
        if self.hardware is not None:
            self._forecast_memory(self.profile.model_copy(deep=True), self.base_dir, self.hardware)

    def refresh_all(self) -> None:
        for path, editor in self.editors.items():
            editor.show_value(get_value(self.profile, path))
        self.profile_changed(None)

    def _refresh_visibility(self) -> None:
        rules = visible_rules(self.profile)
        for path, editor in self.editors.items():
            shown = is_visible(path, self.profile, rules)
            if not shown and editor.error is not None:
                editor.show_value(get_value(self.profile, path))  # a hidden field cannot hold a refused value
            if editor.display != shown:
                editor.display = shown
        for heading in self.query(SectionHeading):
            path = (heading.id or "").removeprefix("heading-").replace("-", ".")
            shown = is_visible(path, self.profile, rules)
            if heading.display != shown:
                heading.display = shown

    def _refresh_checks(self) -> None:
        """Validation and the plan, in memory: nothing is written."""
        if self.hardware is None:
            return
        problems = [Problem(path, "error", f"the typed value is refused: {message}",
                            "Correct it; until then the profile keeps the last accepted value.")
                    for path, message in self.invalid_fields.items()]
        problems += validate(self.profile, self.hardware, base_dir=self.base_dir)
        problems += self.model_problems
        problems.sort(key=lambda p: p.severity != "error")
        self.problems = problems
        self.query_one(ValidationPanel).problems = tuple(problems)
        by_field: dict[str, Problem] = {}
        for problem in problems:
            by_field.setdefault(field_of(problem.field, self.editors) or "", problem)
        for path, editor in self.editors.items():
            mine = by_field.get(path)
            editor.problem = (mine.severity, f"{mine.message} Fix: {mine.fix}") if mine else None
        try:
            self.plan = build_launch(self.profile, preview_dir(self.profile.name), self.hardware,
                                     base_dir=self.base_dir)
        except Exception as err:  # a half-edited profile may not build: say why instead of a stale plan
            self.plan = None
            unavailable = f"The command cannot be built yet: {err}"
            for view in self.query(PlanView):
                view.unavailable = unavailable
        for view in self.query(PlanView):
            view.plan = self.plan

    def _refresh_status(self) -> None:
        if not self.is_mounted:
            return
        where = profile_label(self.profile_path) if self.profile_path else "not saved yet"
        flags = " [example]" if self.read_only else ""
        dirty = self.is_dirty
        status = self.query_one("#status-profile", Static)
        status.update(f"{self.profile.name} — {where}{flags}{' ● modified' if dirty else ''}")
        if status.has_class("-dirty") != dirty:
            status.set_class(dirty, "-dirty")
        self.query_one("#status-hardware", Static).update(hardware_line(self.hardware))

    # ------------------------------------------------------------ workers

    class HardwareDetected(Message):
        def __init__(self, hardware: HardwareInfo) -> None:
            super().__init__()
            self.hardware = hardware

    class ModelDescribed(Message):
        def __init__(self, info: ModelInfo, inference: SwiftInference, registry: dict | None) -> None:
            super().__init__()
            self.info = info
            self.inference = inference
            self.registry = registry

    class DatasetsScanned(Message):
        def __init__(self, reports: tuple[DatasetReport, ...]) -> None:
            super().__init__()
            self.reports = reports

    class MemoryForecast(Message):
        def __init__(self, summary: str | None) -> None:
            super().__init__()
            self.summary = summary

    class LaunchFailed(Message):
        def __init__(self, message: str) -> None:
            super().__init__()
            self.message = message

    @work(thread=True, exclusive=True, group="hardware", exit_on_error=False, description="Detecting hardware")
    def _detect_hardware(self) -> None:
        self.post_message(self.HardwareDetected(detect_hardware()))

    @on(HardwareDetected)
    def _hardware_detected(self, event: HardwareDetected) -> None:
        self.hardware = event.hardware
        self.precision_info.update(precision_support(self.hardware))
        self.profile_changed(None)

    @work(thread=True, exclusive=True, group="model-details", exit_on_error=False, description="Reading config.json")
    def _describe_model(self, m: ModelSection, base_dir: Path) -> None:
        info = describe_source(m.source, base_dir)
        registry = load_swift_registry()
        inference = infer_swift_types(info, registry, model_type=m.model_type, template=m.template)
        self.post_message(self.ModelDescribed(info, inference, registry))
        if registry is None and inference.needs_choice and info.origin != "builtin":
            self.call_from_thread(self._read_swift_registry, info, m)

    @work(thread=True, exclusive=True, group="swift-registry", exit_on_error=False,
          description="Reading ms-swift's model registry (first time only)")
    def _read_swift_registry(self, info: ModelInfo, m: ModelSection) -> None:
        from backend.models import build_swift_registry

        self.app.notify("Asking ms-swift which model_type/template fit (first time only, about 15 s)…",
                        title="Model", timeout=8)
        try:
            registry = build_swift_registry()
        except Exception as err:  # swift missing or broken: the user can still type the values
            self.app.notify(f"ms-swift's registry could not be read: {err}", severity="warning")
            return
        inference = infer_swift_types(info, registry, model_type=m.model_type, template=m.template)
        self.post_message(self.ModelDescribed(info, inference, registry))

    @on(ModelDescribed)
    def _model_described(self, event: ModelDescribed) -> None:
        if event.info.ref != self.profile.model.source:
            return  # an answer about a model that is no longer chosen
        self.model_info = event.info
        self.model_details.info = event.info
        self.model_details.inference = event.inference
        self.model_problems = swift_type_problems(event.inference)
        if event.registry is not None:
            self._offer_choices(event.inference, event.registry)
        self._refresh_checks()

    def _offer_choices(self, inference: SwiftInference, registry: dict) -> None:
        """Typing in model_type / template completes from swift's own names, the likely ones first."""
        types = [*inference.model_type_choices, *registry["model_types"]]
        templates = [*inference.template_choices, *registry["templates"]]
        for path, names in (("model.model_type", types), ("model.template", templates)):
            self.editors[path].suggestions = list(dict.fromkeys(names))

    def _start_dataset_scan(self) -> None:
        self._scan_stop.set()
        self._scan_stop = threading.Event()
        refs = [*self.profile.data.train, *self.profile.data.val]
        self._scan_datasets(refs, self.profile.model.source, self.profile.training.max_length, self.base_dir,
                            self._scan_stop)

    @work(thread=True, exclusive=True, group="dataset-scan", exit_on_error=False, description="Scanning datasets")
    def _scan_datasets(self, refs: list[str], source: str, max_length: int, base_dir: Path,
                       stop: threading.Event) -> None:
        reports = [DatasetReport(parse_ref(ref, base_dir)) for ref in refs]
        self.post_message(self.DatasetsScanned(tuple(reports)))
        for report in reports:
            if report.ref.path is not None and not report.ref.problem:
                report.scan = scan_dataset(report.ref.path, stop=stop)
            if stop.is_set():
                return
        self.post_message(self.DatasetsScanned(tuple(reports)))
        model_dir = model_dir_of(source, base_dir)
        for report in reports:
            if report.scan is None or stop.is_set():
                continue
            if not has_local_tokenizer(model_dir):
                report.token_note = "tokens: counted once the model's tokenizer is local (characters only now)"
                continue
            try:
                report.tokens = token_summary(report.ref.path, model_dir,  # type: ignore[arg-type]
                                              max_length=max_length)
            except Exception as err:  # a tokenizer that cannot be read only costs the token column
                report.token_note = f"tokens: not counted ({err})"
            if stop.is_set():
                return
        self.post_message(self.DatasetsScanned(tuple(reports)))

    @on(DatasetsScanned)
    def _datasets_scanned(self, event: DatasetsScanned) -> None:
        self.dataset_summary.reports = event.reports

    @work(thread=True, exclusive=True, group="memory", exit_on_error=False, description="Memory forecast")
    def _forecast_memory(self, profile: LaunchProfile, base_dir: Path, hardware: HardwareInfo) -> None:
        model_dir = model_dir_of(profile.model.source, base_dir)
        self.post_message(self.MemoryForecast(forecast_summary(profile, model_dir, hardware)))

    @on(MemoryForecast)
    def _memory_forecast(self, event: MemoryForecast) -> None:
        self.query_one(MemoryLine).summary = event.summary

    # ------------------------------------------------------------ actions: pickers

    def action_pick_model(self) -> None:
        roots = list(dict.fromkeys([Path.cwd(), self.base_dir]))
        self.app.push_screen(ModelPickerScreen(self.profile.model.source, roots), self._model_picked)

    def _model_picked(self, source: str | None) -> None:
        if not source or source == self.profile.model.source:
            return
        was_builtin_types = (self.profile.model.model_type, self.profile.model.template) == BUILTIN_TYPES
        self.set_field("model.source", source)
        if is_builtin(source):
            if self.profile.model.model_type is None and self.profile.model.template is None:
                self.set_field("model.model_type", BUILTIN_TYPES[0])
                self.set_field("model.template", BUILTIN_TYPES[1])
                self.notify("model_type qwen2 and template qwen set: swift cannot infer them for the built-in model.")
        elif was_builtin_types:
            self.set_field("model.model_type", None)
            self.set_field("model.template", None)
            self.notify("model_type/template of the built-in model cleared; see the Model tab for swift's inference.")

    def action_pick_dataset(self) -> None:
        current = self.profile.data.train[0] if self.profile.data.train else ""
        roots = list(dict.fromkeys([Path.cwd(), self.base_dir]))
        self.app.push_screen(DatasetPickerScreen(current, roots, self.base_dir), self._dataset_picked)

    def _dataset_picked(self, ref: str | None) -> None:
        if not ref:
            return
        before = self.profile.data.train
        self.set_field("data.train", [ref])
        if len(before) > 1:
            self.notify(f"data.train replaced (was: {' '.join(before)}); edit the field to list several.")

    @on(Button.Pressed, "#pick-model-button")
    def _pick_model_pressed(self) -> None:
        self.action_pick_model()

    @on(Button.Pressed, "#pick-dataset-button")
    def _pick_dataset_pressed(self) -> None:
        self.action_pick_dataset()

    # ------------------------------------------------------------ actions: details pane, navigation

    def action_cycle_details(self) -> None:
        """Next details tab, focused so arrows and PageUp/PageDown scroll it."""
        tabs = self.query_one("#details", TabbedContent)
        order = ["details-problems", "details-command", "details-config"]
        tabs.active = order[(order.index(tabs.active) + 1) % len(order)] if tabs.active in order else order[0]
        target = {"details-problems": "#validation-list", "details-command": "#command-preview",
                  "details-config": "#config-preview"}[tabs.active]
        self.query_one(target).focus()

    def action_next_group(self) -> None:
        tabs = self.query_one("#settings", TabbedContent)
        order = [f"tab-{tab_id}" for tab_id, _, _ in TABS]
        tabs.active = order[(order.index(tabs.active) + 1) % len(order)]

    def show_field(self, path: str) -> None:
        """Bring a field into view and focus it (from a problem in the panel)."""
        editor = self.editors.get(field_of(path, self.editors) or "")
        if editor is None:
            return
        tab_id = next(t for t, _, sections in TABS if any(
            (s and editor.path.startswith(s + ".")) or (not s and "." not in editor.path) for s in sections))
        self.query_one("#settings", TabbedContent).active = f"tab-{tab_id}"
        editor.display = True
        self.call_after_refresh(editor.focus_control)
        self.call_after_refresh(editor.scroll_visible)

    def on_validation_panel_jump_to(self, event: ValidationPanel.JumpTo) -> None:
        self.show_field(event.field)

    # ------------------------------------------------------------ actions: launch

    def action_launch(self) -> None:
        if self.hardware is None:
            self.notify("Still detecting this machine's hardware; try again in a moment.", severity="warning")
            return
        blocking = errors(self.problems)
        if blocking:
            self.query_one("#details", TabbedContent).active = "details-problems"
            first = blocking[0]
            self.notify(f"{first.field}: {first.message}\nFix: {first.fix}",
                        title=f"Launch refused: {len(blocking)} error(s)", severity="error", timeout=10)
            return
        self.app.push_screen(ConfirmScreen("Launch this run?", self.launch_summary(),
                                           [("Launch", "launch", "success"), ("Cancel", "cancel", "default")],
                                           id="confirm-launch"), self._launch_confirmed)

    def launch_summary(self) -> str:
        p = self.profile
        steps = f"{p.training.max_steps} steps" if p.training.max_steps > 0 else f"{p.training.num_train_epochs:g} epochs"
        warnings = [x for x in self.problems if x.severity == "warning"]
        lines = [
            f"profile   {p.name}",
            f"model     {p.model.source}",
            f"data      {' '.join(p.data.train)}",
            f"tuner     {p.tuner.type} · precision {p.precision.mode} · {p.distribution.strategy} "
            f"× {p.distribution.world_size}",
            f"length    {steps}",
            "The run starts detached: it keeps going if this terminal or SSH session closes.",
        ]
        if warnings:
            lines.append(f"{len(warnings)} warning(s): {'; '.join(w.field for w in warnings)}")
        return "\n".join(lines)

    def _launch_confirmed(self, answer: str | None) -> None:
        if answer == "launch":
            self.notify("Starting the run…", timeout=4)
            self._start_run(self.profile.model_copy(deep=True))

    @work(thread=True, exclusive=True, group="launch", exit_on_error=False, description="Starting the run")
    def _start_run(self, profile: LaunchProfile) -> None:
        from backend.runs.manager import LaunchRefused, start_run

        try:
            run = start_run(profile, base_dir=self.base_dir, hardware=self.hardware)
        except LaunchRefused as err:
            self.post_message(self.LaunchFailed("\n".join(str(p) for p in err.problems)))
            return
        except Exception as err:  # shown to the user; nothing was started
            self.post_message(self.LaunchFailed(f"{type(err).__name__}: {err}"))
            return
        self.post_message(RunLaunched(run.path))

    @on(LaunchFailed)
    def _launch_failed(self, event: LaunchFailed) -> None:
        self.notify(event.message, title="Launch failed", severity="error", timeout=15)

    @on(RunLaunched)
    def _launched(self, event: RunLaunched) -> None:
        self.notify(f"Run started: {event.run_dir.name}", title="Launched")
        self.app.open_run(event.run_dir)  # type: ignore[attr-defined]

    # ------------------------------------------------------------ actions: profiles

    def action_save(self) -> None:
        if self.profile_path is None or self.read_only:
            self.action_save_as()
            return
        self.save_to(self.profile_path)

    def save_to(self, path: Path) -> bool:
        """Save the form's profile to `path`; False (and a message) when it cannot be."""
        if self.invalid_fields:
            names = ", ".join(self.invalid_fields)
            self.notify(f"Fix the refused values first: {names}", title="Not saved", severity="error")
            return False
        try:
            save_profile(self.profile, path)
        except OSError as err:
            self.notify(f"{path}: {err}", title="Not saved", severity="error")
            return False
        self.saved_text = profile_to_toml(self.profile)
        self.profile_path = Path(path).resolve()
        self.profile_changed("profile")
        self.notify(f"Saved {display_path(path)}")
        return True

    def action_save_as(self) -> None:
        default = f"./{self.profile.name}.toml"

        def check(path: Path) -> str | None:
            return None if path.suffix == ".toml" else "a profile file name ends in .toml"

        self.app.push_screen(PathPromptScreen("Save profile as", default, check=check, id="save-as-dialog"),
                             self._save_as_chosen)

    def _save_as_chosen(self, path: Path | None) -> None:
        if path is None:
            return
        path = path.resolve()
        if path.exists() and path != self.profile_path:
            self.app.push_screen(ConfirmScreen("Replace file?", f"{display_path(path)} exists.",
                                               [("Replace", "replace", "warning"), ("Cancel", "cancel", "default")]),
                                 lambda answer: self._save_as_to(path) if answer == "replace" else None)
            return
        self._save_as_to(path)

    def _save_as_to(self, path: Path) -> None:
        old_base = self.base_dir
        for field in ("model.source", "data.train", "data.val", "output.output_dir"):
            value = get_value(self.profile, field)
            if isinstance(value, list):
                rebased = [rebase_ref(ref, old_base, path.parent) for ref in value]
            else:
                rebased = rebase_ref(value, old_base, path.parent) if value and looks_local(value) else value
            if rebased != value:
                self.set_field(field, rebased)
        self.save_to(path)

    def action_open(self) -> None:
        if self.is_dirty:
            self.app.push_screen(ConfirmScreen("Unsaved changes", "Opening another profile discards the changes "
                                               "in the form.", [("Discard and open", "open", "warning"),
                                                                ("Cancel", "cancel", "default")]),
                                 lambda answer: self._ask_open() if answer == "open" else None)
            return
        self._ask_open()

    def _ask_open(self) -> None:
        candidates = sorted(SHIPPED_PROFILES_DIR.glob("*.toml")) + sorted(Path.cwd().glob("*.toml"))
        suggestions = [(display_path(p), str(p)) for p in dict.fromkeys(c.resolve() for c in candidates)
                       if looks_like_profile(p)]
        self.app.push_screen(PathPromptScreen("Open profile", "", suggestions=suggestions, check=check_profile,
                                              id="open-dialog"), self._open_chosen)

    def _open_chosen(self, path: Path | None) -> None:
        if path is not None:
            self.open_profile(path)

    def open_profile(self, path: Path) -> None:
        try:
            profile = load_profile(path)
        except ProfileError as err:
            self.notify(str(err), title="Profile not opened", severity="error", timeout=15)
            return
        self._adopt(profile, path)
        self.refresh_all()
        self.notify(f"Opened {display_path(path)}")

    def diff_text(self) -> str:
        """Unified diff: the saved file (canonical form) -> the form."""
        if self.profile_path is None or not self.profile_path.is_file():
            saved, name = "", "(no saved file)"
        else:
            name = display_path(self.profile_path)
            try:
                saved = profile_to_toml(load_profile(self.profile_path))
            except ProfileError:
                saved = self.profile_path.read_text(encoding="utf-8", errors="replace")
        lines = difflib.unified_diff(saved.splitlines(keepends=True), profile_to_toml(self.profile).splitlines(
            keepends=True), fromfile=f"{name} (saved)", tofile="form")
        return "".join(lines)

    def action_diff(self) -> None:
        text = self.diff_text()
        if not text:
            self.notify("The form matches the saved profile.", title="No differences")
            return
        self.app.push_screen(TextScreen("Form vs saved profile", text, diff=True, id="diff-view"))

    # ------------------------------------------------------------ actions: command

    def action_copy_command(self) -> None:
        if self.plan is None:
            self.notify("There is no command yet.", severity="warning")
            return
        line = self.plan.shell_line()
        self.app.copy_to_clipboard(line)
        self.notify(f"Copied {len(line)} characters (OSC 52: the terminal must allow clipboard access).",
                    title="Command copied")

    def action_save_script(self) -> None:
        if self.plan is None:
            self.notify("There is no command yet.", severity="warning")
            return
        self.app.push_screen(PathPromptScreen("Save the launch command as a script", f"./{self.profile.name}-launch.sh",
                                              id="script-dialog"), self._script_chosen)

    def _script_chosen(self, path: Path | None) -> None:
        if path is not None and self.plan is not None:
            self.save_script(path)

    def save_script(self, path: Path) -> None:
        """Write the accelerate config the command names, then the executable script (atomic)."""
        assert self.plan is not None
        try:
            self.plan.write_configs()
            write_executable_atomic(path, launch_script(self.plan, self.profile.name, self.profile_path))
        except OSError as err:
            self.notify(f"{path}: {err}", title="Script not written", severity="error")
            return
        self.notify(f"Wrote {display_path(path)}", title="Script saved")

    # ------------------------------------------------------------ command palette

    def system_commands(self) -> Iterator[SystemCommand]:
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            keys = binding.key.replace(",", " / ")
            yield SystemCommand(f"{binding.description}", f"{binding.tooltip} [{keys}]",
                                lambda action=binding.action: self.run_action(action))
        for tab_id, title, _ in TABS:
            yield SystemCommand(f"Settings: {title}", f"Show the {title} settings",
                                lambda tab=tab_id: setattr(self.query_one("#settings", TabbedContent), "active",
                                                           f"tab-{tab}"))
