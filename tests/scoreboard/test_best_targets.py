"""Merge, chat and infer take the run's best checkpoint by default (not the newest) and say which and
why; an explicit checkpoint still wins (hand-made run folders: nothing is trained or loaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.checkpoints.pins import pin
from backend.checkpoints.targets import TargetError, best_model_of_run, target_of_run
from backend.inference.batch import plan_infer
from backend.merge.job import plan_merge
from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, saved

EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.25), saved(4),
          log(6, 0.25), evaluation(6, eval_loss=1.75), saved(6)]


def test_chat_and_infer_take_the_best(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    target = target_of_run(run.path)
    assert target.adapters == (str(run.path / "output" / "checkpoint-4"),)
    assert target.reason == "checkpoint-4: lowest eval loss 1.25"
    assert best_model_of_run(run.path).reason == "checkpoint-4: lowest eval loss 1.25"
    data = tmp_path / "data.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n')
    _, spec = plan_infer(run, dataset=[str(data)])
    assert "checkpoint: checkpoint-4: lowest eval loss 1.25" in spec.notes
    assert "--adapters" in spec.argv and spec.argv[spec.argv.index("--adapters") + 1].endswith("checkpoint-4")


def test_merge_takes_the_best_and_says_why(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    plan = plan_merge(run)
    assert plan.checkpoint == run.path / "output" / "checkpoint-4"
    assert plan.target == run.path / "merged" / "checkpoint-4-merged"
    assert plan.notes[0] == "checkpoint: checkpoint-4: lowest eval loss 1.25"


def test_explicit_checkpoint_wins(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    assert target_of_run(run.path, checkpoint=6).reason == "checkpoint-6: asked for"
    plan = plan_merge(run, 2)
    assert plan.checkpoint.name == "checkpoint-2" and plan.notes[0] == "checkpoint: checkpoint-2: asked for"
    with pytest.raises(TargetError, match="has no checkpoint-8; it has: 2, 4, 6"):
        target_of_run(run.path, checkpoint=8)


def test_incomplete_best_is_passed_over(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: False, 6: True})  # the best eval's checkpoint was cut off
    assert target_of_run(run.path).reason == "checkpoint-6: lowest eval loss 1.75"


def test_no_loss_recorded_takes_the_newest_and_says_so(tmp_path: Path) -> None:
    run = fake_run(tmp_path, [saved(2), saved(4)], {2: True, 4: True})
    assert target_of_run(run.path).reason == ("checkpoint-4: the newest (no loss was recorded to rank the "
                                              "checkpoints)")


def test_pinned_copy_is_taken_after_rotation(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    pin(run, 4)
    shutil.rmtree(run.path / "output" / "checkpoint-4")  # rotated away
    target = target_of_run(run.path)
    assert target.adapters == (str(run.path / "pinned" / "checkpoint-4"),)
    assert target.reason == "checkpoint-4: lowest eval loss 1.25"
    assert target_of_run(run.path, checkpoint=4).adapters == (str(run.path / "pinned" / "checkpoint-4"),)
