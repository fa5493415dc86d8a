"""The editor of one launch-profile field, built from the pydantic schema of `LaunchProfile`.

Each `FieldEditor` shows one field (label, control, one-line help). It parses what is typed
and posts `FieldEditor.Edited` upward (with `refused` set when the text cannot be parsed);
the settings form assigns the value to the profile document and shows the verdict.
Values set from outside (a picker, an opened profile) arrive through `show_value`, which
does not echo an `Edited` message.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import var
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static, TextArea

from tui.profile_fields import FieldSpec, format_value, parse_text
from tui.widgets.quiet import show_text


class FieldEditor(Vertical):
    """One profile field: label, control, and a note line (help, or why the value is refused)."""

    DEFAULT_CSS = """
    FieldEditor {
        height: auto;
        .field-row { height: 1; }
        /* a multi-line text is as tall as its text (up to 8 lines): a fixed box cut it and drew a
           scrollbar's fragments beside it */
        &.-multiline .field-row { height: auto; }
        .field-label { width: 30; color: $text; }
        .field-control { width: 1fr; }
        TextArea.field-control { height: auto; min-height: 2; max-height: 8; }
        .field-button { width: auto; margin-left: 1; }
        .field-note { color: $text-muted; padding-left: 30; height: auto; }
        &:focus-within .field-label { text-style: bold; color: $accent; }
        &.-invalid .field-note { color: $error; }
        &.-invalid .field-control { background: $error 25%; }
        &.-problem-error .field-note { color: $error; }
        &.-problem-warning .field-note { color: $warning; }
    }
    """

    error: var[str | None] = var(None)
    """Why the typed value was refused (shown at the field, in red)."""
    problem: var[tuple[str, str] | None] = var(None)
    """A pre-launch problem on this field: (severity, message)."""
    swift_default: var[str] = var("")
    """What swift uses while the field is unset (read from swift), shown in the empty text box."""

    class Edited(Message):
        """The user changed the field; `value` is parsed but not validated yet, or `refused` says
        why the text could not be parsed (then `value` is None)."""

        def __init__(self, editor: FieldEditor, value: Any, refused: str | None = None) -> None:
            super().__init__()
            self.editor = editor
            self.value = value
            self.refused = refused

        @property
        def control(self) -> FieldEditor:
            return self.editor

    def __init__(self, spec: FieldSpec, value: Any, *, button: tuple[str, str] | None = None) -> None:
        super().__init__(id=spec.dom_id, classes="field-editor" + (" -multiline" if spec.kind == "multiline" else ""))
        self.spec = spec
        self._value = value  # the value on show: a control event that does not change it is no edit
        self._button = button
        self._suggestions: list[str] = []
        self.tooltip = spec.help

    @property
    def path(self) -> str:
        return self.spec.path

    def compose(self) -> ComposeResult:
        with Horizontal(classes="field-row"):
            yield Label(self.spec.name, classes="field-label")
            yield self._make_control(self._value)
            if self._button:
                label, button_id = self._button
                yield Button(label, id=button_id, compact=True, classes="field-button")
        yield Static(self.spec.help, classes="field-note", markup=False)

    def _make_control(self, value: Any) -> Widget:
        spec = self.spec
        if spec.kind == "bool":
            return Checkbox("", bool(value), compact=True, classes="field-control")
        if spec.kind == "choice":
            options = [(label, index) for index, (label, _) in enumerate(spec.choices)]
            return Select(options, value=self._choice_index(value), allow_blank=False, compact=True,
                          classes="field-control")
        if spec.kind == "multiline":
            area = TextArea(format_value(spec, value), soft_wrap=True, compact=True, classes="field-control")
            area.show_line_numbers = False
            return area
        return Input(format_value(spec, value), compact=True, classes="field-control",
                     select_on_focus=False)

    def watch_swift_default(self) -> None:
        if self.is_mounted:
            self._apply_swift_default()

    def _apply_swift_default(self) -> None:
        if isinstance(self.control_widget, Input):
            self.control_widget.placeholder = self.swift_default

    def _choice_index(self, value: Any) -> int:
        for index, (_, choice) in enumerate(self.spec.choices):
            if choice == value and type(choice) is type(value):
                return index
        return 0

    @property
    def control_widget(self) -> Widget:
        return self.query_one(".field-control")

    def focus_control(self) -> None:
        self.control_widget.focus()

    def on_mount(self) -> None:
        control = self.control_widget
        if self.app.is_headless and isinstance(control, (Input, TextArea)):
            control.cursor_blink = False  # snapshots and pilots: a steady cursor
        self._update_note()
        self._apply_suggestions()
        self._apply_swift_default()  # a value set before the editor was mounted (a hidden tab)

    @property
    def suggestions(self) -> list[str]:
        return self._suggestions

    @suggestions.setter
    def suggestions(self, names: list[str]) -> None:
        """Completions offered while typing (text fields only)."""
        self._suggestions = names
        self._apply_suggestions()

    def _apply_suggestions(self) -> None:
        if self.is_mounted and self._suggestions and isinstance(self.control_widget, Input):
            self.control_widget.suggester = SuggestFromList(self._suggestions, case_sensitive=False)

    def show_value(self, value: Any) -> None:
        """Show `value` without posting Edited (the profile already holds it)."""
        self._value = value
        self.error = None
        if not self.is_mounted:  # a lazily mounted tab: compose shows `_value`
            return
        control = self.control_widget
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed, TextArea.Changed):
            if isinstance(control, Checkbox):
                control.value = bool(value)
            elif isinstance(control, Select):
                control.value = self._choice_index(value)
            elif isinstance(control, TextArea):
                if control.text != format_value(self.spec, value):
                    control.text = format_value(self.spec, value)
            elif isinstance(control, Input):
                text = format_value(self.spec, value)
                if control.value != text:
                    control.value = text

    def accepted(self, value: Any) -> None:
        """The profile took the typed value (in its own form); the control keeps what was typed."""
        self._value = value

    def shows(self, value: Any) -> bool:
        """Whether the editor already stands for `value`."""
        return value == self._value and type(value) is type(self._value)

    @property
    def text(self) -> str:
        """What the control shows, as text (for tests and messages)."""
        control = self.control_widget
        if isinstance(control, Input):
            return control.value
        if isinstance(control, TextArea):
            return control.text
        if isinstance(control, Select):
            return self.spec.choices[control.value][0]  # type: ignore[index]
        return "true" if control.value else "false"  # type: ignore[attr-defined]

    def _post(self, value: Any) -> None:
        if self.shows(value) and self.error is None:
            return  # a control announcing the value it was given (on mount, or from show_value)
        self._value = value
        self.post_message(self.Edited(self, value))

    @on(Input.Changed, ".field-control")
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()
        try:
            value = parse_text(self.spec, event.value)
        except ValueError as err:
            self.error = str(err)
            self.post_message(self.Edited(self, None, refused=str(err)))
            return
        self._post(value)

    @on(TextArea.Changed, ".field-control")
    def _text_changed(self, event: TextArea.Changed) -> None:
        event.stop()
        self._post(event.text_area.text)

    @on(Select.Changed, ".field-control")
    def _select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if isinstance(event.value, int):
            self._post(self.spec.choices[event.value][1])

    @on(Checkbox.Changed, ".field-control")
    def _checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self._post(event.value)

    def watch_error(self) -> None:
        self._update_note()

    def watch_problem(self) -> None:
        self._update_note()

    def _update_note(self) -> None:
        if not self.is_mounted:
            return
        note = self.query_one(".field-note", Static)
        severity = self.problem[0] if self.problem else None
        self.set_class(self.error is not None, "-invalid")
        self.set_class(self.error is None and severity == "error", "-problem-error")
        self.set_class(self.error is None and severity == "warning", "-problem-warning")
        if self.error is not None:
            show_text(note, f"✗ {self.error}")
        elif self.problem is not None:
            mark = "✗" if severity == "error" else "!"
            show_text(note, f"{mark} {self.problem[1]}")
        else:
            show_text(note, self.spec.help)


class SectionHeading(Static):
    """A sub-heading inside a settings tab (e.g. the FSDP block of Distribution)."""

    DEFAULT_CSS = """
    SectionHeading {
        margin-top: 1;
        text-style: bold;
        color: $accent;
    }
    """
