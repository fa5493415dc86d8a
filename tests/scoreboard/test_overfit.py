"""The watchdog's `overfit` alert on hand-written series: the eval loss rose at N evaluations in a row
while the train loss fell; `[watch] overfit_evals` sets N and `actions.overfit = "stop"` stops the run
once the next checkpoint is saved (not before: the evaluation that raised it gets its checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend.contract.alerts import read_alerts
from backend.contract.event_writer import EventWriter
from backend.contract.events import Eval, Log
from backend.rundir.layout import RunFolder
from backend.watch.config import WatchSection
from backend.watch.loss_detectors import OverfitDetector
from backend.watch.watchdog import Watchdog
from tests.scoreboard.scoreboard_helpers import evaluation, log, saved


def feed(detector: OverfitDetector, series: list[tuple[int, float, float]]) -> list[tuple[int | None, str]]:
    """(step, train loss logged at it, eval loss at it) per evaluation; the findings' (step, message)."""
    found = []
    for step, train, value in series:
        found += detector.on_event(Log(step=step, loss=train))
        found += detector.on_event(Eval(step=step, metrics={"eval_loss": value}))
    return [(f.step, f.message) for f in found]


def test_eval_rising_while_train_falls_raises_once() -> None:
    series = [(10, 2.0, 1.5), (20, 1.5, 1.25), (30, 1.0, 1.375), (40, 0.75, 1.5), (50, 0.5, 1.625)]
    assert feed(OverfitDetector(2), series) == [
        (40, "overfitting: the eval loss rose at 2 evaluations in a row (1.25 at step 20 to 1.5 at step 40) while "
             "the train loss fell (1.5 to 0.75); the lowest eval loss was 1.25 at step 20")]


def test_not_when_the_train_loss_rose_too_or_the_streak_breaks() -> None:
    diverging = [(10, 1.0, 1.0), (20, 1.25, 1.25), (30, 1.5, 1.5), (40, 2.0, 2.0)]  # both rise: divergence
    assert feed(OverfitDetector(2), diverging) == []
    noisy = [(10, 2.0, 1.5), (20, 1.5, 1.625), (30, 1.0, 1.5), (40, 0.75, 1.625), (50, 0.5, 1.5)]
    assert feed(OverfitDetector(2), noisy) == []  # never two rises in a row


def test_rearms_after_an_evaluation_that_did_not_rise() -> None:
    series = [(10, 2.0, 1.0), (20, 1.5, 1.25), (30, 1.0, 0.5), (40, 0.75, 0.75)]
    assert [step for step, _ in feed(OverfitDetector(1), series)] == [20, 40]


def test_train_loss_is_the_mean_since_the_last_evaluation() -> None:
    detector = OverfitDetector(1)
    for step, loss in ((1, 3.0), (2, 1.0)):  # mean 2.0 before the first evaluation
        detector.on_event(Log(step=step, loss=loss))
    assert detector.on_event(Eval(step=2, metrics={"eval_loss": 1.0})) == []
    for step, loss in ((3, 0.5), (4, 3.0)):  # mean 1.75: fell, although the last one logged (3.0) did not
        detector.on_event(Log(step=step, loss=loss))
    (found,) = detector.on_event(Eval(step=4, metrics={"eval_loss": 1.5}))
    assert found.evidence["train_loss_at_start"] == 2.0 and found.evidence["train_loss"] == 1.75


def test_watch_section_key_and_stop_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = WatchSection(overfit_evals=2, actions={"overfit": "stop"})
    run = RunFolder(tmp_path / "run")
    run.path.mkdir()
    dog = Watchdog(run, None, config)
    stops: list[str] = []
    monkeypatch.setattr(dog, "stop_run", lambda alert: stops.append(alert.kind))
    events = [log(10, 2.0), evaluation(10, eval_loss=1.5), saved(10), log(20, 1.5), evaluation(20, eval_loss=1.25),
              saved(20), log(30, 1.0), evaluation(30, eval_loss=1.375), saved(30), log(40, 0.75),
              evaluation(40, eval_loss=1.5)]

    writer = EventWriter(run.events_path)
    for kind, fields in events:
        writer.write(kind, **fields)
    dog.poll(time.time(), ticks=False)
    assert [(a.kind, a.step, a.action) for a in read_alerts(run.path)] == [("overfit", 40, "stop")]
    assert stops == []  # not yet: checkpoint-40 is still being saved
    writer.write("checkpoint", step=40, path="output/checkpoint-40")
    writer.close()
    dog.poll(time.time(), ticks=False)
    assert stops == ["overfit"]


def test_validate_warns_when_rotation_cannot_know_the_best() -> None:
    from backend.hardware.machine import HardwareInfo
    from backend.profile import LaunchProfile
    from backend.watch.rules import _rotation_keeps_the_best

    def said(training: dict, data: dict) -> list[str]:  # type: ignore[type-arg]
        profile = LaunchProfile.model_validate({"training": training, "data": data})
        return [f"{p.severity} {p.field}" for p in _rotation_keeps_the_best(profile, HardwareInfo())]

    split = {"split_dataset_ratio": 0.1}
    assert said({"save_total_limit": 2, "save_steps": 100, "eval_steps": 30}, split) == ["warning training.eval_steps"]
    assert said({"save_total_limit": 2, "save_steps": 100, "eval_steps": 50}, split) == []  # every save evaluated
    assert said({"save_total_limit": 2, "save_steps": 100}, split) == []  # swift's eval_steps = save_steps
    assert said({"save_steps": 100, "eval_steps": 30}, split) == []  # no rotation: nothing deleted
    assert said({"save_total_limit": 2, "save_steps": 100, "eval_steps": 30}, {}) == []  # no evaluation at all


def test_best_metric_and_early_stop_reach_swift_only_when_set(tmp_path: Path) -> None:
    from backend.hardware.machine import HardwareInfo
    from backend.launch.command import swift_flags
    from backend.profile import LaunchProfile

    def flags(training: dict) -> dict[str, tuple[str, ...]]:  # type: ignore[type-arg]
        profile = LaunchProfile.model_validate({"training": training})
        found = swift_flags(profile, HardwareInfo(), model="/m", output_dir=tmp_path, base_dir=None, ds_path=None)
        return {f.name: f.values for f in found}

    unset = flags({})
    assert not {"metric_for_best_model", "greater_is_better", "early_stop_interval"} & set(unset)
    chosen = flags({"metric_for_best_model": "token_acc", "greater_is_better": True, "early_stop_interval": 3})
    assert (chosen["metric_for_best_model"], chosen["greater_is_better"], chosen["early_stop_interval"]) == (
        ("token_acc",), ("true",), ("3",))
