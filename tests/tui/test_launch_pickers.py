"""Pick the tiny model and the shipped dataset through the pickers, keyboard only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.widgets import OptionList

from backend.core.paths import BUILTIN_DATASETS
from tests.fakes import CPU_BOX
from tests.tui.conftest import command_shown, oracle_children, settle, shown, shown_bold, until_shown
from tui.app import WorkbenchApp
from tui.modals.dataset_picker import DatasetPickerScreen
from tui.modals.model_picker import ModelPickerScreen
from tui.widgets.dataset_details import DatasetSummary
from tui.widgets.model_details import ModelDetails
from tui.widgets.swift_report import SwiftDataReport
from tui.widgets.trained_tokens import TrainedTokenView


async def _choose(pilot, list_id: str, option_id: str) -> None:
    """Move the highlight to `option_id` with the arrow keys and press Enter."""
    options = pilot.app.screen.query_one(list_id, OptionList)
    options.focus()
    await pilot.pause()
    target = options.get_option_index(option_id)
    options.highlighted = 0
    for _ in range(target):
        await pilot.press("down")
    assert options.highlighted_option.id == option_id
    await pilot.press("enter")
    await pilot.pause()


async def test_pick_tiny_model_and_shipped_dataset(hub_profile: Path, tiny_model: Path, swift_registry: dict) -> None:
    app = WorkbenchApp(hub_profile, hardware=CPU_BOX)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        details = screen.query_one(ModelDetails)
        # a hub id that swift knows by name: the inference comes from swift's own registry
        assert details.inference.how == "name"
        assert details.inference.model_type in swift_registry["model_types"]

        await pilot.press("f7")
        await settle(pilot)
        assert isinstance(app.screen, ModelPickerScreen)
        await _choose(pilot, "#model-list", "builtin:tiny-qwen2")
        await settle(pilot)
        assert app.screen is screen
        model = screen.profile.model
        assert (model.source, model.model_type, model.template) == ("builtin:tiny-qwen2", "qwen2", "qwen")
        config = json.loads((tiny_model / "config.json").read_text())
        on_screen = shown(details)  # the Model tab is the one shown
        assert f"layers: {config['num_hidden_layers']}" in on_screen
        assert f"hidden size: {config['hidden_size']}" in on_screen
        assert f"vocab: {config['vocab_size']:,}" in on_screen
        assert "swift: model_type qwen2, template qwen" in on_screen
        assert screen.form.editors["model.model_type"].text == "qwen2"

        await pilot.press("f8")
        await settle(pilot)
        assert isinstance(app.screen, DatasetPickerScreen)
        await _choose(pilot, "#dataset-list", "builtin:self-cognition")
        await settle(pilot)
        assert screen.profile.data.train == ["builtin:self-cognition"]
        rows = sum(1 for line in BUILTIN_DATASETS["self-cognition"].read_text().splitlines() if line.strip())
        await pilot.press("ctrl+t")  # the Data tab, as the user would look at it
        await pilot.pause()
        summary = shown(screen.query_one(DatasetSummary))
        assert summary.startswith("builtin:self-cognition [builtin] 53 rows"), summary[:200]
        assert rows == 53
        assert "malformed" not in summary and "scanning" not in summary
        assert 'record 1: {"messages": [{"role": "user", "content": "who are you?"}' in summary  # the raw preview
        # #12: swift's own report replaces the first look (asked once the picks settle: a swift child)
        report = screen.query_one(SwiftDataReport)
        swift = await until_shown(pilot, report, "finetune-workbench.<|im_end|>")  # row 1's view drawn in full
        assert swift.startswith("swift's own report builtin:self-cognition swift keeps 53 of 53 rows tokens per row: "
                                "p50 50 · p90 54 · p99 61 · max 61 trained tokens: 865 of 2,636 (32.8 %) steps per "
                                "epoch: 53 (53 rows, batch 1 × accumulation 1 × 1 processes)"), swift
        assert ("row 1 of builtin:self-cognition, line 1 · template qwen · 50 tokens, 17 trained (34.0 %) · "
                "max_length 256") in swift
        # the trained-token view: the answer is drawn as trained (bold), the question as context (not)
        trained = shown_bold(report.query_one(TrainedTokenView))
        assert "I am Quill, a small assistant fine-tuned with finetune-workbench." in trained
        assert "who are you?" not in trained and "system" not in trained

        command = await command_shown(pilot, screen)
        assert f"--model{tiny_model}--" in command
        assert f"--dataset{BUILTIN_DATASETS['self-cognition']}--" in command
        assert "--model_typeqwen2--" in command and "--templateqwen--" in command


async def test_typed_hub_id_and_dataset_with_sample_count(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        await pilot.press("f8")
        await pilot.pause()
        dataset_input = app.screen.query_one("#dataset-input")
        dataset_input.focus()
        dataset_input.value = ""
        await pilot.press(*"swift/self-cognition#500", "enter")
        await settle(pilot)
        assert screen.profile.data.train == ["swift/self-cognition#500"]
        screen.form.show_tab("data")
        await pilot.pause()
        summary = shown(screen.query_one(DatasetSummary))
        assert summary == ("swift/self-cognition#500 [hub, 500 rows sampled] hub dataset: swift downloads it at "
                           "launch; it cannot be previewed offline")
        assert "--dataset'swift/self-cognition#500'--" in await command_shown(pilot, screen)  # quoted: a shell comment


@pytest.mark.one_shot_oracle  # the app's own warm child, stopped with it: no kept one lent
async def test_uninferable_model_type_is_warned_and_choices_offered(
    tmp_path: Path, tiny_model: Path, swift_registry: dict, profile_copy: Path
) -> None:
    import shutil

    from backend.profile import load_profile, save_profile

    folder = shutil.copytree(tiny_model, tmp_path / "my-own-model")  # a name swift does not know
    profile = load_profile(profile_copy)
    profile.model.source = str(folder)
    profile.model.model_type = None
    profile.model.template = None
    save_profile(profile, profile_copy)

    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        (problem,) = [p for p in screen.problems if p.field.startswith("model.")]
        assert (problem.field, problem.severity) == ("model.model_type", "warning")
        assert "qwen2" in problem.fix  # the architecture's candidates, from swift's registry
        assert "choose one" in shown(screen.query_one(ModelDetails))
        assert screen.form.editors["model.model_type"].suggestions[0] == "qwen2"

        # the Data tab: swift's own answer says what it needs and offers its choices (data, not a failure)
        await pilot.press("ctrl+t")
        report = screen.query_one(SwiftDataReport)
        on_screen = await until_shown(pilot, report, "not encoded")
        assert on_screen.startswith("swift's own report ⚠ swift cannot infer model_type: Qwen2ForCausalLM matches "
                                    "2 types: rows are loaded, not encoded. Set model.model_type to one of: qwen2, "
                                    "qwen2_gte. builtin:self-cognition swift keeps 53 of 53 rows rows are loaded, "
                                    "not encoded: swift needs model.model_type"), on_screen
        assert report.failure is None and "ctrl+r" not in on_screen
        screen.form.show_tab("model")
        await pilot.pause()

        # typing: the model details follow each key (swift's registry, no child); swift's data report is
        # asked once the typing pauses, so no wait for it here (each answer costs a swift child)
        details = screen.query_one(ModelDetails)
        editor = screen.form.editors["model.model_type"]
        editor.focus_control()
        await pilot.press(*"qwen2")
        await _until(pilot, lambda: any(p.field == "model.template" for p in screen.problems),
                     "the template problem of model_type qwen2")
        (problem,) = [p for p in screen.problems if p.field.startswith("model.")]
        assert problem.field == "model.template" and "qwen" in problem.fix
        screen.form.editors["model.template"].focus_control()
        await pilot.press(*"qwen")
        await _until(pilot, lambda: details.inference is not None and details.inference.template == "qwen",
                     "the model details of template qwen")
        await pilot.pause()  # the problems the details posted with it
        assert not [p for p in screen.problems if p.field.startswith("model.")]
        assert "--model_typeqwen2--templateqwen--" in await command_shown(pilot, screen)
    # the app is closed: a swift child still reading the data for the last edit was stopped with it
    await _until_no_oracle_child()


async def _until(pilot, condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


async def _until_no_oracle_child(timeout: float = 10.0) -> None:
    """No `backend.oracle.child` process of this test process is left running."""
    import asyncio

    deadline = time.monotonic() + timeout
    while oracle_children():
        assert time.monotonic() < deadline, f"oracle children outlived the app: {oracle_children()}"
        await asyncio.sleep(0.1)
