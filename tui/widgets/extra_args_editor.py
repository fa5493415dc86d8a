"""The editor of `extra_swift_args`: swift's own flag names completed as you type, the help line of the
flag under the cursor, and values kept as typed (a comma stays a comma; no list splitting).

swift's schema is read in a worker thread (a child process the first time, cached afterwards);
until it arrives the editor still parses, and the pre-launch check says the names are not checked yet.
Parsing and help text live in `backend.launch.swift_schema` (`parse_extra_text`, `describe_flag`).
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.suggester import Suggester
from textual.widgets import Input, Static

from backend.launch.swift_schema import SwiftSchema, describe_flag, format_extra_text, last_name, parse_extra_text
from tui.widgets.settings_form import FieldEditor


class SwiftFlagSuggester(Suggester):
    """Completes the flag name at the end of the line (`use_lig` -> `use_liger_kernel=`)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.names = sorted(names)

    async def get_suggestion(self, value: str) -> str | None:
        word = value.rsplit(" ", 1)[-1] if value and not value.endswith(" ") else ""
        if not word or "=" in word:
            return None
        name = word.removeprefix("--")
        match = next((n for n in self.names if n.startswith(name) and n != name), None)
        return value + match[len(name):] + "=" if match else None


class ExtraArgsEditor(FieldEditor):
    """`FieldEditor` for `extra_swift_args`, reading and completing swift's own flags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema: SwiftSchema | None = None
        self.managed: dict[str, str] = {}
        self._flag_help = ""

    def _make_control(self, value: Any) -> Input:
        return Input(format_extra_text(value or {}), compact=True, classes="field-control", select_on_focus=False,
                     placeholder="name=value ...  (e.g. use_liger_kernel=true system='Be brief, and kind.')")

    def on_mount(self) -> None:
        super().on_mount()
        self._load_schema()

    @work(thread=True, exclusive=True, group="swift-schema", exit_on_error=False, description="Reading swift's flags")
    def _load_schema(self) -> None:
        from textual.worker import get_current_worker

        from backend.launch.managed_flags import managed_flags
        from backend.launch.swift_schema import load_schema
        from backend.oracle import OracleCancelled

        worker = get_current_worker()
        try:  # a worker thread: may ask swift once (about 10 s), cached afterwards
            schema = load_schema(cancelled=lambda: worker.is_cancelled)
        except OracleCancelled:
            return  # the editor is gone
        self.app.call_from_thread(self._schema_ready, schema, managed_flags())

    def _schema_ready(self, schema: SwiftSchema | None, managed: dict[str, str]) -> None:
        self.schema, self.managed = schema, managed
        if schema is not None and isinstance(self.control_widget, Input):
            free = [name for name in schema.fields("sft") if name not in managed]
            self.control_widget.suggester = SwiftFlagSuggester(free)

    @on(Input.Changed, ".field-control")
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()
        name = last_name(event.value)
        self._flag_help = describe_flag(name, self.schema, self.managed) if name else ""
        try:
            value = parse_extra_text(event.value, self.schema)
        except ValueError as err:
            self.error = str(err)
            self.post_message(self.Edited(self, None, refused=str(err)))
            return
        self.error = None
        self._update_note()
        self._post(value)

    def show_value(self, value: Any) -> None:
        super().show_value(value)
        if self.is_mounted and isinstance(self.control_widget, Input):
            text = format_extra_text(value or {})
            if self.control_widget.value != text:
                with self.prevent(Input.Changed):
                    self.control_widget.value = text

    def _update_note(self) -> None:
        super()._update_note()
        if self.is_mounted and self.error is None and self.problem is None and self._flag_help:
            self.query_one(".field-note", Static).update(self._flag_help)
