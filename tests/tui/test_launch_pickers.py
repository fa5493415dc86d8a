"""Pick the tiny model and the shipped dataset through the pickers, keyboard only."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import OptionList

from backend.paths import BUILTIN_DATASETS
from tests.fakes import CPU_BOX
from tests.tui.conftest import settle, shown
from tui.app import WorkbenchApp
from tui.widgets.dataset_details import DatasetSummary
from tui.widgets.dataset_picker import DatasetPickerScreen
from tui.widgets.model_details import ModelDetails
from tui.widgets.model_picker import ModelPickerScreen
from tui.widgets.swift_report import SwiftDataReport


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
        assert "user: who are you?" in summary
        swift = screen.query_one(SwiftDataReport).plain  # #12: swift's own report replaces the first look
        assert "swift keeps 53 of 53 rows" in swift and "steps per epoch:" in swift
        assert "⟦" in swift  # the trained-token view of row 1

        command = screen.query_one("#command-preview").text
        assert str(tiny_model) in command
        assert str(BUILTIN_DATASETS["self-cognition"]) in command
        assert "--model_type qwen2" in command and "--template qwen" in command


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
        assert "swift/self-cognition#500" in screen.query_one("#command-preview").text


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

        editor = screen.form.editors["model.model_type"]
        editor.focus_control()
        await pilot.press(*"qwen2")
        await settle(pilot)
        (problem,) = [p for p in screen.problems if p.field.startswith("model.")]
        assert problem.field == "model.template" and "qwen" in problem.fix
        screen.form.editors["model.template"].focus_control()
        await pilot.press(*"qwen")
        await settle(pilot)
        assert not [p for p in screen.problems if p.field.startswith("model.")]
        assert "--model_type qwen2" in screen.query_one("#command-preview").text
