"""The settings form: tuner switches, live validation, refused values at the field, the live preview."""

from __future__ import annotations

from pathlib import Path

import yaml
from run_fixtures import wait_for
from textual.widgets import Input, OptionList, Select

from backend.profile import load_profile
from tests.fakes import CPU_BOX
from tests.tui.conftest import command_shown, details_tab, drawn_lines, settle, shown, squeezed
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmScreen, PathPromptScreen
from tui.screens.launch import LaunchScreen
from tui.widgets.validation_panel import ValidationPanel


async def _select(pilot, screen: LaunchScreen, path: str, label: str) -> None:
    """Choose `label` in the Select of `path` with the keyboard (Enter opens, arrows move, Enter picks)."""
    editor = screen.form.editors[path]
    screen.show_field(path)
    await pilot.pause()
    select = editor.query_one(Select)
    select.focus()
    await pilot.pause()
    labels = [choice for choice, _ in editor.spec.choices]
    steps = labels.index(label) - select.value
    await pilot.press("enter")
    await pilot.pause()
    for _ in range(abs(steps)):
        await pilot.press("down" if steps > 0 else "up")
    await pilot.press("enter")
    await pilot.pause()
    assert editor.text == label


async def _type(pilot, screen: LaunchScreen, path: str, text: str) -> None:
    screen.show_field(path)
    await pilot.pause()
    field = screen.form.editors[path].query_one(Input)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *text)
    await pilot.pause()


async def test_tuner_to_qlora_and_back(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert "--tuner_typelora--" in await command_shown(pilot, screen)
        assert "--quant_bits" not in await command_shown(pilot, screen)
        assert not screen.form.editors["tuner.quant_bits"].display

        await _select(pilot, screen, "tuner.type", "qlora")
        assert screen.profile.tuner.type == "qlora"
        assert screen.form.editors["tuner.quant_bits"].display and screen.form.editors["tuner.bnb_4bit_quant_type"].display
        command = await command_shown(pilot, screen)
        assert "--quant_bits4--" in command and "--quant_methodbnb" in command, command
        assert screen.document.is_dirty

        await _select(pilot, screen, "tuner.type", "lora")
        assert "--quant_bits" not in await command_shown(pilot, screen)
        assert not screen.form.editors["tuner.quant_bits"].display
        assert not screen.document.is_dirty  # back to what the file says
        assert screen.document.diff_text() == ""


async def test_validation_error_appears_blocks_launch_and_clears(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        panel = screen.query_one(ValidationPanel)
        await details_tab(pilot, screen, "problems")
        assert shown(panel.query_one("#validation-summary")) == "✓ No problems: ready to launch."

        await _select(pilot, screen, "precision.bf16", "true")
        await _select(pilot, screen, "precision.fp16", "true")
        assert screen.profile.precision.bf16 and screen.profile.precision.fp16
        await details_tab(pilot, screen, "problems")
        assert shown(panel.query_one("#validation-summary")) == ("1 error and 1 warning: launch refused until errors "
                                                                 "are fixed.")
        assert shown(panel.query_one("#validation-list")).startswith("✗ precision.fp16 fp16 and bf16 are both on")
        assert screen.form.editors["precision.fp16"].has_class("-problem-error")
        command = await command_shown(pilot, screen)
        assert "--fp16true" in command and "--bf16true" in command

        await pilot.press("f5")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)  # refused: no confirmation, nothing started
        assert screen.query_one("#details").active == "details-problems"  # F5 shows why

        await _select(pilot, screen, "precision.fp16", "false")
        await details_tab(pilot, screen, "problems")
        assert shown(panel.query_one("#validation-summary")) == "✓ No problems: ready to launch."
        assert not screen.form.editors["precision.fp16"].has_class("-problem-error")
        assert "--fp16false" in await command_shown(pilot, screen)


async def test_refused_value_is_marked_at_the_field_as_typed(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        before = screen.profile.training.max_steps
        await _type(pilot, screen, "training.max_steps", "-5")
        editor = screen.form.editors["training.max_steps"]
        assert editor.has_class("-invalid")
        assert editor.error and "greater than or equal to -1" in editor.error
        assert screen.profile.training.max_steps == before  # the profile keeps the last accepted value
        assert any(p.field == "training.max_steps" and p.severity == "error" for p in screen.problems)
        await pilot.press("f5")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)

        await _type(pilot, screen, "training.max_steps", "20")
        assert not editor.has_class("-invalid") and editor.error is None
        assert screen.profile.training.max_steps == 20
        assert "--max_steps20--" in await command_shown(pilot, screen)

        await _type(pilot, screen, "training.learning_rate", "fast")
        assert "number" in screen.form.editors["training.learning_rate"].error


async def test_preview_is_the_exact_launch_and_follows_distribution(profile_copy: Path, isolated_runs: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        screen = app.screen
        # what the Command tab draws is, character for character, the command launch runs
        assert await command_shown(pilot, screen) == squeezed(screen.plan.shell_line())
        assert not screen.plan.accelerate_config_path.exists()  # previews are built in memory

        await _select(pilot, screen, "distribution.strategy", "ddp")
        await _type(pilot, screen, "distribution.nproc_per_node", "2")
        await details_tab(pilot, screen, "config")
        config = yaml.safe_load("\n".join(drawn_lines(screen.query_one("#config-preview"))))
        assert config["distributed_type"] == "MULTI_GPU" and config["num_processes"] == 2
        assert screen.form.editors["distribution.fsdp.sharding_strategy"].display is False
        await _select(pilot, screen, "distribution.strategy", "fsdp")
        assert screen.form.editors["distribution.fsdp.sharding_strategy"].display
        # FSDP on a CPU machine is a warning (it runs as DDP), so launch stays allowed
        assert any(p.field == "distribution.strategy" and p.severity == "warning" for p in screen.problems)

        await details_tab(pilot, screen, "problems")
        await pilot.press("f6")
        assert screen.query_one("#details").active == "details-command"
        await pilot.press("f6")
        assert screen.query_one("#details").active == "details-config"

        saved = load_profile(profile_copy)
        assert saved.distribution.strategy == "single"  # nothing was written behind the user's back


async def test_every_action_has_key_id_tooltip_and_palette_entry(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        bindings = [*LaunchScreen.BINDINGS, *WorkbenchApp.BINDINGS]
        for binding in bindings:
            assert binding.id and binding.tooltip, binding
        titles = {command.title for command in app.get_system_commands(screen)}
        for binding in LaunchScreen.BINDINGS:
            assert binding.description in titles
        assert {"Settings: Tuner", "Launch workspace", "Runs"} <= titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"save as")

        def offers_save_as() -> bool:
            found = app.screen.query("CommandList")
            options = found.first(OptionList) if found else None
            return options is not None and any("Save as" in str(options.get_option_at_index(i).prompt)
                                               for i in range(options.option_count))

        await wait_for(pilot, offers_save_as, what="the palette to offer Save as")
        await pilot.press("enter")  # the palette runs the action: the save-as dialog opens
        await wait_for(pilot, lambda: isinstance(app.screen, PathPromptScreen), what="the save-as dialog")


async def test_choosing_a_problem_focuses_its_field(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.set_field("distribution.nproc_per_node", 2)  # "single" with 2 processes: an error
        await pilot.pause()
        assert any(p.field == "distribution.strategy" and p.severity == "error" for p in screen.problems)
        screen.query_one("#validation-list").focus()
        await pilot.press("enter")
        await settle(pilot)
        assert screen.form.active_tab == "distribution"
        assert app.focused is screen.form.editors["distribution.strategy"].control_widget
