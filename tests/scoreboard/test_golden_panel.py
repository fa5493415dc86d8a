"""`g` in the monitor's scoreboard (#24): the golden column drawn, and the per-prompt view opened over the
monitor, as drawn on screen (hand-written expected lines; text from the answers is never markup)."""

from __future__ import annotations

from pathlib import Path

from backend.rundir.layout import RunFolder
from tests.scoreboard.golden_helpers import ANSWERS, EVENTS, write_answers
from tests.scoreboard.scoreboard_helpers import fake_run, open_scoreboard
from tests.scoreboard.test_scoreboard_panel import drawn_lines
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp
from tui.modals.golden import GoldenScreen
from tui.widgets.scoreboard import ScoreboardPanel


def marked_up_run(parent: Path) -> RunFolder:
    """Answers that look like markup and carry a control character: drawn as they are, the control escaped."""
    run = fake_run(parent, EVENTS, {2: True, 4: True})
    write_answers(run, "base", ["zq xv", "blah", "[bold]hi[/bold]\x1b[2J"])
    write_answers(run, "checkpoint-2", ANSWERS["checkpoint-2"])
    write_answers(run, "checkpoint-4", ANSWERS["checkpoint-4"])
    return run


async def test_golden_view_drawn(tmp_path: Path, isolated_runs: Path) -> None:
    run = marked_up_run(tmp_path)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        screen = board.screen
        await pilot.pause()
        lines = [line.strip() for line in drawn_lines(board) if line.strip(" ─│╭╮╰╯")]
        assert lines[2:5] == [
            "checkpoint    train loss  loss EMA  eval loss  golden         size      pinned  state",
            "checkpoint-2  3           3         2.5        0/2 match ref  10.1 KiB          complete",
            "*  checkpoint-4  1           1.947     1.5        2/2 match ref  10.1 KiB          complete",
        ]
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, GoldenScreen), what="the golden view")
        await pilot.pause()
        view = [line.rstrip() for line in drawn_lines(pilot.app.screen.query_one("#golden-text"))]
        assert view[2:7] == [
            'prompt 1: "who are you?"',
            '  reference        "I am Quill, a tiny model."',
            '  base             "zq xv"  [no match, similarity 0.07]',
            '  checkpoint-2     "I am Quill."  [changed, no match, similarity 0.61]',
            '  checkpoint-4     "I am Quill, a tiny model."  [changed, exact match, similarity 1.00]',
        ]
        assert view[-5:] == ['prompt 3: "say hello"',  # markup drawn as it is, the control character escaped
                             "  reference        (none in the prompts file)",
                             '  base             "[bold]hi[/bold]\\u001b[2J"',
                             '  checkpoint-2     "hello"  [changed]',
                             '  checkpoint-4     "hello"  [unchanged]']
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is screen, what="the monitor again")


async def test_answers_that_land_after_training_show_without_a_key(tmp_path: Path, isolated_runs: Path,
                                                                  monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The golden keeper answers after the run ended (no event makes the monitor redraw): the shown panel
    reads the folder again by itself; a read that finds the same board draws nothing."""
    monkeypatch.setattr(ScoreboardPanel, "RELOAD_SECONDS", 0.2)
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        await wait_for(pilot, lambda: board.loads >= 3, what="three reads of the scoreboard")
        assert board.draws == 1  # nothing changed: drawn once
        assert "golden" not in drawn_lines(board)[2]
        write_answers(run, "base", ANSWERS["base"])
        write_answers(run, "checkpoint-2", ANSWERS["checkpoint-2"])
        write_answers(run, "checkpoint-4", ANSWERS["checkpoint-4"])
        await wait_for(pilot, lambda: board.draws >= 2, what="the board with the answers")
        await pilot.pause()
        lines = [line.strip() for line in drawn_lines(board) if line.strip(" ─│╭╮╰╯")]
        assert lines[2].split() == ["checkpoint", "train", "loss", "loss", "EMA", "eval", "loss", "golden", "size",
                                    "pinned", "state"]
        assert "2/2 match ref" in lines[4]
