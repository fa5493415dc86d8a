"""Profiles from the launch workspace: save, save as, reload identical, diff, open, quit with changes,
copy the command, save it as a script."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from textual.widgets import Input

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import load_profile, profile_to_toml
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmScreen, PathPromptScreen, TextScreen


async def _set_text(pilot, screen, path: str, text: str) -> None:
    screen.show_field(path)
    await pilot.pause()
    field = screen.form.editors[path].query_one(Input)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *text)
    await pilot.pause()


async def _answer_path(pilot, path: Path) -> None:
    assert isinstance(pilot.app.screen, PathPromptScreen)
    field = pilot.app.screen.query_one("#path-input", Input)
    field.value = str(path)  # long temporary paths: set, not typed key by key
    await pilot.press("enter")
    await pilot.pause()


async def test_save_as_then_reload_is_identical(tmp_path: Path) -> None:
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.document.read_only  # a shipped example: ctrl+s asks for a new name
        await _set_text(pilot, screen, "tuner.lora_rank", "32")
        await _set_text(pilot, screen, "training.max_steps", "40")
        assert screen.document.is_dirty
        await pilot.press("ctrl+s")
        await pilot.pause()
        target = tmp_path / "saved" / "rank32.toml"
        await _answer_path(pilot, target)
        assert target.is_file() and not screen.document.is_dirty
        assert screen.document.path == target.resolve()
        reloaded = load_profile(target)
        assert reloaded == screen.profile
        assert profile_to_toml(reloaded) == profile_to_toml(screen.profile)
        assert (reloaded.tuner.lora_rank, reloaded.training.max_steps) == (32, 40)
        assert load_profile(QUICKSTART).tuner.lora_rank == 16  # the shipped example is untouched

    # a fresh app on the saved file shows exactly what was saved
    app = WorkbenchApp(target, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert not screen.document.is_dirty
        assert screen.form.editors["tuner.lora_rank"].text == "32"
        assert screen.profile == reloaded


async def test_diff_between_form_and_saved_file(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert not isinstance(app.screen, TextScreen)  # nothing to show
        await _set_text(pilot, screen, "tuner.lora_rank", "4")
        diff = screen.document.diff_text()
        assert "-lora_rank = 16\n" in diff and "+lora_rank = 4\n" in diff
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert isinstance(app.screen, TextScreen)
        await pilot.press("escape")
        await pilot.press("ctrl+s")  # the user's own file: saved in place
        await pilot.pause()
        assert load_profile(profile_copy).tuner.lora_rank == 4
        assert screen.document.diff_text() == ""


async def test_open_another_profile_after_confirming_discard(profile_copy: Path, tmp_path: Path) -> None:
    other = SHIPPED_PROFILES_DIR / "quickstart.toml"
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        await _set_text(pilot, screen, "name", "changed")
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)  # unsaved changes are never dropped silently
        await pilot.press("enter")  # "Discard and open"
        await pilot.pause()
        bad = tmp_path / "bad.toml"
        bad.write_text("[tuner]\nlora_rank = 0\n")
        await _answer_path(pilot, bad)
        assert isinstance(app.screen, PathPromptScreen)  # refused, with the reason, dialog stays
        assert "lora_rank" in str(app.screen.query_one("#path-error").render())
        await _answer_path(pilot, other)
        await settle(pilot)
        assert app.screen is screen and screen.profile == load_profile(other)
        assert screen.form.editors["name"].text == "quickstart" and not screen.document.is_dirty


async def test_quit_asks_when_changes_are_unsaved(profile_copy: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        await _set_text(pilot, screen, "training.seed", "7")
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen and app.is_running
        await pilot.press("ctrl+q")
        await pilot.pause()
        await pilot.press("enter")  # "Save and quit"
        await pilot.pause()
        assert not app.is_running
    assert load_profile(profile_copy).training.seed == 7

    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+q")  # nothing unsaved: quits at once
        await pilot.pause()
        assert not app.is_running


async def test_copy_command_and_save_as_script(profile_copy: Path, tmp_path: Path) -> None:
    app = WorkbenchApp(profile_copy, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.clipboard == screen.plan.shell_line()

        script = tmp_path / "launch.sh"
        await pilot.press("f9")
        await pilot.pause()
        await _answer_path(pilot, script)
        assert os.access(script, os.X_OK)
        text = script.read_text()
        subprocess.run(["bash", "-n", str(script)], check=True)
        body = text.split("exec env ", 1)[1]
        assert shlex.split(body.replace("\\\n", " ")) == shlex.split(screen.plan.shell_line())
        assert screen.plan.accelerate_config_path.is_file()  # the config the command names exists
        assert not list(tmp_path.glob(".launch.sh.*"))  # no temporary file left behind


async def test_new_and_broken_profile_files(tmp_path: Path) -> None:
    new = tmp_path / "fresh.toml"
    app = WorkbenchApp(new, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.profile.name == "fresh" and not new.exists()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert load_profile(new) == screen.profile and not screen.document.is_dirty

    broken = tmp_path / "broken.toml"
    broken.write_text("[tuner]\ntype = 'lorra'\n")
    app = WorkbenchApp(broken, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.document.path is None  # never saved over the user's file
        assert "lorra" in screen.document.open_problem and "tuner.type" in screen.document.open_problem
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
    assert broken.read_text() == "[tuner]\ntype = 'lorra'\n"
