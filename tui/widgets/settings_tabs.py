"""The settings form of the launch workspace: one tab per profile section, one `FieldEditor` per field.

The form edits the screen's `ProfileDocument`: an editor's `Edited` message is assigned to the
document here, then `SettingsTabs.Changed` goes up. What comes back down is bound by the screen:
`revision` (look at the document again: values set elsewhere, refused values, which fields
matter), `problems` (each shown at its field), `hardware` and `suggestions`. Hidden tabs are
filled after the first frame (Textual's `Lazy`).
"""

from __future__ import annotations

from collections.abc import Iterator

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.lazy import Lazy
from textual.message import Message
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from backend.hardware.machine import HardwareInfo
from backend.launch.managed_flags import unset_key_defaults
from backend.launch.swift_schema import SwiftSchema
from backend.launch.validate import Problem
from tui.profile_document import ProfileDocument
from tui.profile_fields import TABS, field_spec, get_value, is_visible, tab_paths, visible_rules
from tui.screens.launch_support import distribution_support, field_of, precision_support
from tui.widgets.extra_args_editor import ExtraArgsEditor
from tui.widgets.quiet import show_text
from tui.widgets.settings_form import FieldEditor, SectionHeading

PICK_BUTTONS = {"model.source": ("Pick… F7", "pick-model-button"), "data.train": ("Pick… F8", "pick-dataset-button")}


class SettingsTabs(Vertical):
    """Model / Data / Tuner / Precision / Distribution / Training / Output."""

    DEFAULT_CSS = """
    SettingsTabs {
        TabbedContent, TabbedContent > ContentSwitcher { height: 1fr; }
        TabPane { padding: 0; height: 100%; }
        .settings-scroll { height: 100%; padding: 0 1; }
        .tab-info { height: auto; padding: 0 1; background: $boost; }
    }
    """

    revision: var[int] = var(0, init=False)
    """The document's revision shown (bound: a new one means look again)."""
    problems: var[tuple[Problem, ...] | None] = var(None, init=False)
    """The form's problems, each shown at its field."""
    hardware: var[HardwareInfo | None] = var(None, init=False)
    """This machine, for the precision and distribution notes."""
    suggestions: var[dict[str, tuple[str, ...]]] = var(dict, init=False)
    """Names offered while typing, per field."""

    class Changed(Message):
        """The user changed the document through a field."""

        def __init__(self, path: str) -> None:
            super().__init__()
            self.path = path

    def __init__(self, document: ProfileDocument, *, beside: dict[str, Widget], id: str | None = None) -> None:
        """`beside`: a widget shown under a field's editor (the model and dataset details)."""
        super().__init__(id=id)
        self.document = document
        self.beside = beside
        self.editors: dict[str, FieldEditor] = {}
        self._generation = document.generation
        self._precision = Static(id="precision-support", classes="tab-info", markup=False)
        self._distribution = Static(id="distribution-support", classes="tab-info", markup=False)
        self._schema: SwiftSchema | None = None

    def compose(self) -> ComposeResult:
        with TabbedContent(id="settings-tabs"):
            for index, (tab_id, title, sections) in enumerate(TABS):
                with TabPane(title, id=f"tab-{tab_id}"):
                    scroll = VerticalScroll(id=f"scroll-{tab_id}", classes="settings-scroll", can_focus=False)
                    with Lazy(scroll) if index else scroll:  # hidden tabs are mounted after the first frame
                        yield from self._tab_content(tab_id, sections)

    def _tab_content(self, tab_id: str, sections: list[str]) -> Iterator[Widget]:
        if tab_id == "precision":
            yield self._precision
        if tab_id == "distribution":
            yield self._distribution
        for item in tab_paths(sections):
            if isinstance(item, tuple):
                yield SectionHeading(item[1].rsplit(".", 1)[-1].upper(), id=f"heading-{item[1].replace('.', '-')}")
                continue
            kind = ExtraArgsEditor if item == "extra_swift_args" else FieldEditor  # #11: swift's own flags
            editor = kind(field_spec(item), get_value(self.document.profile, item), button=PICK_BUTTONS.get(item))
            editor.display = bool(is_visible(item, self.document.profile))
            self.editors[item] = editor
            yield editor
            if item in self.beside:
                yield self.beside[item]

    # ------------------------------------------------------------ navigation

    @property
    def active_tab(self) -> str:
        return self.query_one(TabbedContent).active.removeprefix("tab-")

    def show_tab(self, tab_id: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{tab_id}"

    def next_tab(self) -> None:
        order = [tab_id for tab_id, _, _ in TABS]
        self.show_tab(order[(order.index(self.active_tab) + 1) % len(order)])

    def show_field(self, path: str) -> None:
        """Bring a field into view and focus it (from a problem in the panel)."""
        editor = self.editors.get(field_of(path, self.editors) or "")
        if editor is None:
            return
        self.show_tab(next(t for t, _, sections in TABS if any(
            (s and editor.path.startswith(s + ".")) or (not s and "." not in editor.path) for s in sections)))
        editor.display = True
        self.call_after_refresh(editor.focus_control)
        self.call_after_refresh(editor.scroll_visible)

    # ------------------------------------------------------------ editing

    @on(FieldEditor.Edited)
    def _edited(self, event: FieldEditor.Edited) -> None:
        event.stop()
        editor = event.editor
        if event.refused is not None:
            self.document.refuse(editor.path, event.refused)
        elif self.document.set(editor.path, event.value) is None:
            editor.accepted(get_value(self.document.profile, editor.path))
        self.post_message(self.Changed(editor.path))

    def watch_revision(self) -> None:
        """Show what the document holds now: values set elsewhere, refused values, relevant fields."""
        document = self.document
        reset, self._generation = document.generation != self._generation, document.generation
        rules = visible_rules(document.profile)
        for path, editor in self.editors.items():
            value, refused = get_value(document.profile, path), document.refused.get(path)
            if refused is None and (reset or not editor.shows(value)):
                editor.show_value(value)
            editor.error = refused
            _show(editor, is_visible(path, document.profile, rules))
        for heading in self.query(SectionHeading):
            path = (heading.id or "").removeprefix("heading-").replace("-", ".")
            _show(heading, is_visible(path, document.profile, rules))
        show_text(self._distribution, distribution_support(self.hardware, document.profile))
        self._show_swift_defaults()

    @work(thread=True, exclusive=True, group="form-swift-schema", exit_on_error=False,
          description="Reading swift's defaults")
    def _load_schema(self) -> None:
        from textual.worker import get_current_worker

        from backend.launch.swift_schema import load_schema
        from backend.oracle import OracleError

        worker = get_current_worker()
        try:  # a worker thread: cached, or asked of swift once (about 10 s)
            schema = load_schema(cancelled=lambda: worker.is_cancelled)
        except OracleError:  # OracleCancelled included: the form is gone
            return  # no hints in the boxes; the extra-args editor shows why swift could not be read
        if schema is not None:
            self.app.call_from_thread(self._schema_read, schema)

    def _schema_read(self, schema: SwiftSchema) -> None:
        self._schema = schema
        self._show_swift_defaults()

    def _show_swift_defaults(self) -> None:
        """Each unset field that swift decides shows swift's value for this tuner in its empty box."""
        if self._schema is None:
            return
        defaults = unset_key_defaults(self.document.profile, self._schema)
        for path, editor in self.editors.items():
            editor.swift_default = defaults.get(path, "")

    def on_mount(self) -> None:
        self.watch_hardware()
        if getattr(self.app, "first_frame_shown", True):  # else the launch screen calls after_first_frame
            self._load_schema()

    def after_first_frame(self) -> None:
        """Swift's defaults are read (and the unset fields' hints built) once the first frame is drawn, not
        beside it (#41)."""
        self._load_schema()

    def watch_hardware(self) -> None:
        show_text(self._precision, precision_support(self.hardware))
        show_text(self._distribution, distribution_support(self.hardware, self.document.profile))

    def watch_problems(self) -> None:
        by_field: dict[str, Problem] = {}
        for problem in self.problems or ():
            by_field.setdefault(field_of(problem.field, self.editors) or "", problem)
        for path, editor in self.editors.items():
            mine = by_field.get(path)
            editor.problem = (mine.severity, f"{mine.message} Fix: {mine.fix}") if mine else None

    def watch_suggestions(self) -> None:
        for path, names in self.suggestions.items():
            if path in self.editors:
                self.editors[path].suggestions = list(names)


def _show(widget: Widget, shown: bool) -> None:
    if widget.display != bool(shown):  # setting it unchanged would still restyle the widget
        widget.display = bool(shown)
