"""Editors for launch-profile fields, built from the pydantic schema of `LaunchProfile`.

Each `FieldEditor` shows one field (label, control, one-line help). It parses what is typed
and posts `FieldEditor.Edited` upward; the screen assigns the value to the profile (pydantic
validates on assignment) and sets `error` back on the editor when the value is refused.
Values set from outside (a picker, an opened profile) go downward through `show_value`,
which does not echo an `Edited` message.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static, TextArea

from backend.profile import LaunchProfile

Kind = Literal["bool", "choice", "text", "number", "list", "int_list", "mapping", "multiline"]
NONE_CHOICE = "(none)"


@dataclass(frozen=True)
class FieldSpec:
    """How one profile field is edited."""

    path: str  # dotted, e.g. "distribution.fsdp.cpu_offload"
    kind: Kind
    help: str
    choices: tuple[tuple[str, Any], ...] = ()
    optional: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def dom_id(self) -> str:
        return "field-" + self.path.replace(".", "__")


def section_model(section: str) -> type[BaseModel]:
    model: type[BaseModel] = LaunchProfile
    for part in section.split(".") if section else []:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    return model


def field_spec(path: str) -> FieldSpec:
    section, _, name = path.rpartition(".")
    info = section_model(section).model_fields[name]
    annotation = info.annotation
    help_text = info.description or ""
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = next((a for a in args if a is not type(None)), annotation) if optional else annotation
    origin = typing.get_origin(inner)
    if path == "description":
        return FieldSpec(path, "multiline", help_text)
    if inner is bool:
        if optional:
            choices = (("auto", None), ("true", True), ("false", False))
            return FieldSpec(path, "choice", help_text, choices, optional=True)
        return FieldSpec(path, "bool", help_text)
    if origin is Literal:
        choices = tuple((str(v), v) for v in typing.get_args(inner))
        if optional:
            choices = ((NONE_CHOICE, None), *choices)
        return FieldSpec(path, "choice", help_text, choices, optional)
    if origin is list:
        item = typing.get_args(inner)[0]
        return FieldSpec(path, "int_list" if item is int else "list", help_text)
    if origin is dict:
        return FieldSpec(path, "mapping", help_text)
    if inner in (int, float):
        return FieldSpec(path, "number", help_text, optional=optional)
    return FieldSpec(path, "text", help_text, optional=optional)


def section_paths(section: str) -> Iterator[str | tuple[str, str]]:
    """Field paths of a section in schema order; nested sections yield (heading, path) first."""
    model = section_model(section)
    prefix = f"{section}." if section else ""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield ("heading", prefix + name)
            yield from section_paths(prefix + name)
        else:
            yield prefix + name


def get_value(profile: LaunchProfile, path: str) -> Any:
    target: Any = profile
    for part in path.split("."):
        target = getattr(target, part)
    return target


def set_value(profile: LaunchProfile, path: str, value: Any) -> None:
    """Assign through pydantic (validate_assignment): raises ValidationError when refused."""
    section, _, name = path.rpartition(".")
    target = get_value(profile, section) if section else profile
    setattr(target, name, value)


def format_value(spec: FieldSpec, value: Any) -> str:
    if value is None:
        return ""
    if spec.kind == "list":
        return shlex.join(value)
    if spec.kind == "int_list":
        return ",".join(str(v) for v in value)
    if spec.kind == "mapping":
        return " ".join(f"{k}={shlex.quote(_scalar_text(v))}" for k, v in value.items())
    if spec.kind == "number" and isinstance(value, float):
        return repr(value)
    return str(value)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def parse_text(spec: FieldSpec, text: str) -> Any:
    """Typed text -> the value to assign; ValueError says what is wrong and how to write it."""
    stripped = text.strip()
    if spec.kind in ("text", "number") and spec.optional and not stripped:
        return None
    if spec.kind == "number":
        if not stripped:
            raise ValueError("a number is needed")
        return stripped  # pydantic converts and range-checks
    if spec.kind == "list":
        try:
            return shlex.split(stripped)
        except ValueError as err:
            raise ValueError(f"{err}; separate entries with spaces, quote ones that hold spaces") from None
    if spec.kind == "int_list":
        parts = [p for p in stripped.replace(",", " ").split() if p]
        if not all(p.isdigit() for p in parts):
            raise ValueError("whole numbers separated by commas, e.g. 0,1")
        return [int(p) for p in parts]
    if spec.kind == "mapping":
        return _parse_mapping(stripped)
    return text


def _parse_mapping(text: str) -> dict[str, Any]:
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"{err}; write key=value pairs separated by spaces") from None
    result: dict[str, Any] = {}
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep or not key:
            raise ValueError(f"{token!r} is not key=value")
        result[key] = _parse_scalar(raw)
    return result


def _parse_scalar(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            pass
    return raw.split(",") if "," in raw else raw


class FieldEditor(Vertical):
    """One profile field: label, control, and a note line (help, or why the value is refused)."""

    error: reactive[str | None] = reactive(None)
    """Why the typed value was refused (shown at the field, in red)."""
    problem: reactive[tuple[str, str] | None] = reactive(None)
    """A pre-launch problem on this field: (severity, message)."""

    class Edited(Message):
        """The user changed the field; `value` is parsed but not validated yet."""

        def __init__(self, editor: FieldEditor, value: Any) -> None:
            super().__init__()
            self.editor = editor
            self.value = value

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
        if value == self._value and type(value) is type(self._value) and self.error is None:
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
            note.update(f"✗ {self.error}")
        elif self.problem is not None:
            mark = "✗" if severity == "error" else "!"
            note.update(f"{mark} {self.problem[1]}")
        else:
            note.update(self.spec.help)


class SectionHeading(Static):
    """A sub-heading inside a settings tab (e.g. the FSDP block of Distribution)."""
