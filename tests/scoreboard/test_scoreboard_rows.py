"""The scoreboard's rows from hand-made run folders: alignment, best, damaged lines, vanished folders."""

from __future__ import annotations

from pathlib import Path

import pytest

import backend.checkpoints.stats as checkpoint_stats
from backend.checkpoints.board_text import text_lines
from backend.checkpoints.scoreboard import scoreboard
from backend.rundir.checkpoint_verdict import FolderListing
from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, saved


def test_eval_at_each_save_best_is_lowest_eval_loss(tmp_path: Path) -> None:
    events = [log(1, 4.0), log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2),
              log(3, 2.0), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4),
              log(5, 0.5), log(6, 0.25), evaluation(6, eval_loss=1.75), saved(6)]
    run = fake_run(tmp_path, events, {2: True, 4: True, 6: True})
    board = scoreboard(run)
    assert [r.step for r in board.rows] == [2, 4, 6]
    assert [(r.train_loss, r.eval_value, r.eval_step, r.status) for r in board.rows] == [
        (3.0, 2.5, 2, "complete"), (1.0, 1.5, 4, "complete"), (0.25, 1.75, 6, "complete")]
    # the monitor's EMA (weight 0.9, debiased): step 2 = (0.1*4*0.9 + 0.1*3) / (1 - 0.81) = 0.66/0.19
    assert board.rows[0].train_loss_ema == pytest.approx(0.66 / 0.19)
    assert board.best is not None and board.best.step == 4
    assert board.basis == "eval"
    assert board.reason(board.best) == "checkpoint-4: lowest eval loss 1.5"
    assert board.rows[0].size_bytes == 10_334 and board.rows[0].size_text() == "10.1 KiB"


def test_eval_nearest_before_the_save_and_never_one_of_an_earlier_checkpoint(tmp_path: Path) -> None:
    events = [log(5, 2.0), evaluation(5, eval_loss=1.9), log(10, 1.5), saved(10),
              log(15, 1.2), log(20, 1.1), saved(20),
              log(25, 1.0), evaluation(27, eval_loss=1.4), log(30, 0.9), saved(30)]
    run = fake_run(tmp_path, events, {10: True, 20: True, 30: True})
    rows = scoreboard(run).rows
    assert [(r.eval_value, r.eval_step) for r in rows] == [(1.9, 5), (None, None), (1.4, 27)]
    assert [r.eval_text() for r in rows] == ["1.9 (step 5)", "-", "1.4 (step 27)"]
    assert [r.train_text() for r in rows] == ["1.5", "1.1", "0.9"]
    assert scoreboard(run).best.step == 30  # type: ignore[union-attr]


def test_no_evaluation_best_by_train_loss_ema_and_said_so(tmp_path: Path) -> None:
    events = [log(2, 3.0), saved(2), log(4, 1.0), saved(4), log(6, 1.25), saved(6)]
    board = scoreboard(fake_run(tmp_path, events, {2: True, 4: True, 6: True}))
    assert board.basis == "train"
    # EMA by hand (0.9, debiased): step 4 (0.27 + 0.1)/0.19 = 1.947; step 6 (0.333 + 0.125)/0.271 = 1.690
    assert board.best.step == 6  # type: ignore[union-attr]
    assert text_lines(board)[0] == ("best: checkpoint-6: lowest train loss EMA 1.69 (no evaluation in this run; "
                                    "the EMA, not one noisy train loss)")


def test_incomplete_checkpoint_is_shown_never_best(tmp_path: Path) -> None:
    events = [log(2, 3.0), evaluation(2, eval_loss=2.0), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.0)]
    board = scoreboard(fake_run(tmp_path, events, {2: True, 4: False}))
    assert [r.status for r in board.rows] == ["complete", "incomplete"]
    assert board.rows[1].state_text().startswith("incomplete: checkpoint-4 lacks trainer_state.json")
    assert board.best.step == 2  # type: ignore[union-attr]


def test_greater_is_better_metric_from_the_profile(tmp_path: Path) -> None:
    events = [evaluation(2, eval_loss=1.0, eval_token_acc=0.5), saved(2),
              evaluation(4, eval_loss=1.2, eval_token_acc=0.75), saved(4)]
    board = scoreboard(fake_run(tmp_path, events, {2: True, 4: True},
                                training={"metric_for_best_model": "token_acc"}))
    assert board.metric.greater_is_better is True
    assert [r.eval_value for r in board.rows] == [0.5, 0.75]
    assert board.reason(board.best) == "checkpoint-4: highest eval token acc 0.75"  # type: ignore[arg-type]


def test_damaged_eval_line_marks_its_row_and_the_others_still_show(tmp_path: Path) -> None:
    events = [log(2, 3.0), evaluation(2, eval_loss=2.0), saved(2), log(4, 1.0), saved(4),
              log(6, 0.5), evaluation(6, eval_loss=1.8), saved(6)]
    run = fake_run(tmp_path, events, {2: True, 4: True, 6: True})
    with run.events_path.open("ab") as handle:  # the eval of step 4 torn (a full disk), then the file goes on
        handle.write(b'{"v":1,"type":"eval","time":1.0,"rank":0,"step":4,"metrics":{"eval_loss":0.\n')
    board = scoreboard(run)
    assert [r.eval_text() for r in board.rows] == ["2", "damaged", "1.8"]
    assert board.best.step == 6  # type: ignore[union-attr]
    assert board.problems == ["events.jsonl: 1 damaged line skipped"]
    assert "events.jsonl: 1 damaged line skipped" in text_lines(board)


def test_folder_that_vanishes_while_read_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [log(2, 3.0), evaluation(2, eval_loss=2.0), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.0), saved(4)]
    run = fake_run(tmp_path, events, {2: True, 4: True})
    real = checkpoint_stats.list_folder

    def rotated_meanwhile(folder: Path) -> FolderListing:  # swift's rotation deletes it between listing and reading
        if folder.name == "checkpoint-4":
            import shutil
            shutil.rmtree(folder)
        return real(folder)

    monkeypatch.setattr(checkpoint_stats, "list_folder", rotated_meanwhile)
    board = scoreboard(run)
    assert [(r.name, r.status) for r in board.rows] == [("checkpoint-2", "complete"), ("checkpoint-4", "gone")]
    assert board.rows[1].state_text() == "gone"
    assert board.best.step == 2  # type: ignore[union-attr]


def test_rotated_checkpoints_are_said_not_listed(tmp_path: Path) -> None:
    events = [log(2, 3.0), saved(2), log(4, 1.0), saved(4)]
    board = scoreboard(fake_run(tmp_path, events, {4: True}))
    assert [r.step for r in board.rows] == [4]
    assert text_lines(board)[-1] == "saved earlier, deleted since (save_total_limit's rotation, or by hand): step 2"
