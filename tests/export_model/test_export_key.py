"""Key x on the monitor's scoreboard: a choice of formats; a format this machine cannot make is refused with the
reason, shown as a notification (a hand-made run folder: nothing is trained or exported)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button

from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, open_scoreboard, saved
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmScreen

EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4)]


async def test_x_offers_the_formats_and_says_why_one_is_refused(tmp_path: Path, isolated_runs: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from backend.hardware.machine import detect_hardware

    if detect_hardware().has_cuda:
        pytest.skip("this machine has a GPU: awq would not be refused")
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        board.focus_rows()
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), what="the export choice")
        dialog = pilot.app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert [str(b.label) for b in dialog.query(Button)] == ["merged", "bnb-4bit", "awq", "gptq", "gguf", "ollama"]
        assert dialog.title_text == "Export checkpoint-2"
        await pilot.click("#choice-awq")
        await wait_for(pilot, lambda: any(n.title == "Not exported" for n in pilot.app._notifications),
                       what="the refusal")
        note = next(n for n in pilot.app._notifications if n.title == "Not exported")
        assert "--to awq: swift export --quant_method awq --quant_bits 4 needs a CUDA GPU and a calibration " \
               "dataset" in note.message
        assert not (run.path / "exports").exists() and not (run.path / "jobs").exists()
