"""The TUI's "Import command…" dialog (#11): paste, see the profile, take it; refusals keep Import disabled."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.widgets import Button, Static, TextArea

from backend.launch.swift_schema import SwiftSchema, require_schema
from tui.widgets.import_dialog import ImportCommandScreen


@pytest.fixture(scope="session")
def schema() -> SwiftSchema:
    return require_schema()


class DialogApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[Any] = []

    def on_mount(self) -> None:
        self.push_screen(ImportCommandScreen(), self.results.append)


async def _wait(pilot: Any, condition: Any) -> None:
    for _ in range(200):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met")


async def test_paste_preview_and_import(schema: SwiftSchema) -> None:
    app = DialogApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ImportCommandScreen)
        area = screen.query_one("#import-text", TextArea)
        area.text = "swift sft --model Qwen/Qwen2.5-7B-Instruct --dataset d.jsonl --lora_rnak 8"
        status = screen.query_one("#import-status", Static)
        await _wait(pilot, lambda: "lora_rnak" in str(status.render()))
        assert "did you mean lora_rank" in str(status.render())
        assert screen.query_one("#import-ok", Button).disabled
        area.text = "NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B-Instruct --dataset d.jsonl --train_type full"
        await _wait(pilot, lambda: not screen.query_one("#import-ok", Button).disabled)
        preview = str(screen.query_one("#import-preview", Static).render())
        assert 'type = "full"' in preview and "nproc_per_node = 2" in preview
        assert "--train_type renamed to --tuner_type" in str(status.render())
        await pilot.click("#import-ok")
        await pilot.pause()
    profile = app.results[-1]
    assert profile.tuner.type == "full" and profile.distribution.nproc_per_node == 2


async def test_launch_workspace_imports_a_command(schema: SwiftSchema) -> None:
    from tests.fakes import CPU_BOX
    from tests.tui.conftest import QUICKSTART, settle
    from tui.app import WorkbenchApp

    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        workspace = app.screen
        await pilot.press("f4")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ImportCommandScreen)
        dialog.query_one("#import-text", TextArea).text = (
            "export NCCL_DEBUG=INFO\nswift sft --model Qwen/Qwen2.5-7B-Instruct --dataset d.jsonl \\\n"
            "  --tuner_type full --use_liger_kernel true --system 'Be brief, and kind.'")
        await _wait(pilot, lambda: not dialog.query_one("#import-ok", Button).disabled)
        await pilot.click("#import-ok")
        await settle(pilot)
        assert app.screen is workspace
        document = workspace.document
        assert document.path is None and document.is_dirty
        profile = document.profile
        assert (profile.tuner.type, profile.model.system) == ("full", "Be brief, and kind.")
        assert profile.extra_swift_args == {"use_liger_kernel": True} and profile.env == {"NCCL_DEBUG": "INFO"}
        shown = workspace.form.editors["extra_swift_args"].text
        assert shown == "use_liger_kernel=true"
