"""An unset field shows, in its empty box, the value swift will use instead (#11: read from swift).

The learning rate is the case that matters: swift decides it from the tuner type in its own code
(1e-4 for LoRA, 1e-5 for full fine-tuning), so the form shows swift's value for the tuner chosen,
and changes it when the tuner changes."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import wait_for
from textual.widgets import Input

from backend.launch.swift_schema import require_schema
from backend.profile import load_profile, save_profile
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle, shown
from tui.app import WorkbenchApp


def _unset_rate_profile(tmp_path: Path) -> Path:
    profile = load_profile(QUICKSTART)
    profile.training.learning_rate = None
    profile.training.num_train_epochs = None
    return save_profile(profile, tmp_path / "unset-rate.toml")


async def test_unset_learning_rate_shows_swifts_value_for_the_tuner(tmp_path: Path) -> None:
    require_schema()  # swift's schema, asked once per test session (a child process; the app asks it too)
    app = WorkbenchApp(_unset_rate_profile(tmp_path), hardware=CPU_BOX)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.form.show_tab("training")
        rate = screen.form.editors["training.learning_rate"].query_one(Input)
        epochs = screen.form.editors["training.num_train_epochs"].query_one(Input)
        await wait_for(pilot, lambda: "0.0001" in shown(rate), what="swift's LoRA learning rate in the box")
        assert shown(rate) == "0.0001 (swift's default for lora)"
        assert shown(epochs) == "3.0 (swift's default)"

        screen.form.show_tab("tuner")
        await pilot.pause()
        tuner = screen.form.editors["tuner.type"]
        tuner.focus_control()
        await pilot.pause()
        for key in ("enter", "up", "enter"):  # open the list, lora -> full, pick it
            await pilot.press(key)
            await pilot.pause()
        assert tuner.text == "full"
        screen.form.show_tab("training")
        await wait_for(pilot, lambda: "1e-05" in shown(rate), what="swift's full fine-tuning rate")
        assert shown(rate) == "1e-05 (swift's default for full)"

        # a value the user types replaces the hint
        rate.focus()
        await pilot.press(*"2e-4")
        await pilot.pause()
        assert shown(rate) == "2e-4"
        assert screen.document.profile.training.learning_rate == 2e-4
