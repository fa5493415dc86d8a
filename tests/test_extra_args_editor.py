"""The TUI's extra-args editor (#11): swift's flag names completed, the flag's help shown, values kept as typed."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input, Static

from backend.launch.swift_schema import SwiftSchema, require_schema
from tui.profile_fields import field_spec
from tui.widgets.extra_args_editor import ExtraArgsEditor


@pytest.fixture(scope="session")
def schema() -> SwiftSchema:
    return require_schema()


class EditorApp(App[None]):
    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__()
        self.value = value
        self.edits: list[Any] = []

    def compose(self) -> ComposeResult:
        yield ExtraArgsEditor(field_spec("extra_swift_args"), self.value)

    def on_field_editor_edited(self, event: ExtraArgsEditor.Edited) -> None:
        self.edits.append(event.value)


async def test_completion_help_and_values_as_typed(schema: SwiftSchema) -> None:
    app = EditorApp({"system": "Be brief, and kind."})
    async with app.run_test(size=(120, 12)) as pilot:
        editor = app.query_one(ExtraArgsEditor)
        control = editor.query_one(Input)
        assert control.value == "system='Be brief, and kind.'"
        while editor.schema is None:  # the worker reads swift's schema (cached for the session)
            await pilot.pause(0.05)
        control.focus()
        control.cursor_position = len(control.value)
        await pilot.press("space", *"use_lig")
        await pilot.pause(0.1)
        await pilot.press("right")  # accept the suggestion
        assert control.value == "system='Be brief, and kind.' use_liger_kernel="
        await pilot.press(*"true")
        await pilot.pause(0.05)
        note = str(editor.query_one(".field-note", Static).render())
        assert note.startswith("use_liger_kernel (bool, swift default False): Whether to use the Liger kernel")
        assert app.edits[-1] == {"system": "Be brief, and kind.", "use_liger_kernel": True}
        await pilot.press(*" lora_rank=64")
        await pilot.pause(0.05)
        assert "managed by the profile (tuner.lora_rank)" in str(editor.query_one(".field-note", Static).render())
