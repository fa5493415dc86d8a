"""The monitor's scoreboard (key c) as drawn on screen, from a hand-made run folder: hand-written expected
rows; enter asks for a chat with the row's checkpoint, m asks to merge it, p pins it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.widget import Widget

from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, open_scoreboard, saved
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal


def drawn_lines(widget: Widget) -> list[str]:
    """What a widget and its children draw on the terminal, line by line (blank lines left out)."""
    lines = [line.text.rstrip() for line in widget.render_lines(Region(0, 0, *widget.outer_size))]
    return [line for line in lines if line] + [line for child in widget.children for line in drawn_lines(child)]


EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4),
          log(6, 0.25), evaluation(6, eval_loss=1.75), saved(6)]


async def test_scoreboard_drawn_and_its_keys(tmp_path: Path, isolated_runs: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: False})
    asked: list[object] = []
    monkeypatch.setattr(WorkbenchApp, "on_chat_requested", lambda self, message: asked.append(message.target))
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        screen = board.screen
        await pilot.pause()
        lines = [line.strip() for line in drawn_lines(board) if line.strip(" ─│╭╮╰╯")]
        assert lines[1:6] == [
            "best: checkpoint-4: lowest eval loss 1.5",
            "checkpoint    train loss  loss EMA  eval loss  size      pinned  state",
            "checkpoint-2  3           3         2.5        10.1 KiB          complete",
            "*  checkpoint-4  1           1.947     1.5        10.1 KiB          complete",
            # the reason runs to the panel's edge (160 columns); `workbench checkpoints` prints it whole
            "checkpoint-6  0.25        1.321     1.75       10.1 KiB          incomplete: checkpoint-6 lacks "
            "trainer_state.json (written last: cut off while being sav",
        ]
        await pilot.press("down")  # the cursor on checkpoint-4
        await pilot.press("enter")
        await wait_for(pilot, lambda: asked, what="the chat request")
        # the request carries the lookup the chat screen runs in its worker (the screen draws first, #41)
        target = asked[0]() if callable(asked[0]) else asked[0]
        assert getattr(target, "reason", None) == "checkpoint-4: asked for"
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal), what="the merge question")
        assert "on checkpoint-4 as a job" in " ".join(" ".join(drawn_lines(pilot.app.screen)).split())
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is screen, what="the monitor again")
        loads = board.loads
        await pilot.press("p")
        await wait_for(pilot, lambda: board.loads > loads, what="the scoreboard after the pin")
        assert json.loads((run.path / "pins.json").read_text()) == {"pinned": [4]}
        assert board.board is not None and board.board.row(4).pinned  # type: ignore[union-attr]
