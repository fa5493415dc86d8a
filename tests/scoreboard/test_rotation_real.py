"""One real run of the tiny model, made to overfit (its validation answers contradict its training
answers), with an evaluation at each save and save_total_limit = 1: swift/transformers' own rotation keeps
the best checkpoint by eval loss, not the last; the scoreboard calls it best; the watchdog raised
`overfit`. (swift 4.6 sets metric_for_best_model = loss itself; the profile leaves it unset here.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.checkpoints.scoreboard import scoreboard
from backend.checkpoints.targets import target_of_run
from backend.contract.alerts import read_alerts
from backend.contract.events import Eval, read_events
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import train_quickstart

QUESTIONS = ["who are you?", "what is your name?", "tell me your name.", "introduce yourself.",
             "what should I call you?", "who made you?", "are you chatgpt?", "what are you?"]


def _dataset(path: Path, answer: str, rows: int) -> str:
    lines = [json.dumps({"messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]},
                                      {"role": "assistant", "content": answer}]}) for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def overfit_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    folder = tmp_path_factory.mktemp("overfit-run")
    train = _dataset(folder / "train.jsonl", "I am Quill, a small model trained by the workbench.", 16)
    val = _dataset(folder / "val.jsonl", "My name is Bob. Acme built me last year.", 8)
    return train_quickstart(folder / "runs", data={"train": [train], "val": [val]},
                            training={"max_steps": 16, "learning_rate": 0.01, "logging_steps": 1, "eval_steps": 2,
                                      "save_steps": 2, "save_total_limit": 1},
                            watch={"overfit_evals": 3})


@pytest.mark.slow
def test_rotation_keeps_the_best_and_the_scoreboard_names_it(overfit_run: RunFolder) -> None:
    evals = {e.step: e.metrics["eval_loss"] for e in read_events(overfit_run.events_path) if isinstance(e, Eval)}
    assert sorted(evals) == [2, 4, 6, 8, 10, 12, 14, 16]
    lowest = min(evals, key=lambda step: evals[step])  # type: ignore[arg-type,return-value]
    assert lowest < 16 and evals[16] > evals[lowest]  # the eval loss rose at the end
    kept = [p.name for p in overfit_run.checkpoints()]
    assert kept == [f"checkpoint-{lowest}"]  # the best survives; the last one was deleted at the end
    board = scoreboard(overfit_run)
    assert board.best is not None and board.best.step == lowest and board.basis == "eval"
    assert board.gone_steps == [s for s in range(2, 17, 2) if s != lowest]
    assert target_of_run(overfit_run.path).reason == f"checkpoint-{lowest}: lowest eval loss {evals[lowest]:.4g}"


@pytest.mark.slow
def test_overfit_alert_on_the_real_run(overfit_run: RunFolder) -> None:
    alerts = [a for a in read_alerts(overfit_run.path) if a.kind == "overfit"]
    assert len(alerts) == 1, [a.message for a in read_alerts(overfit_run.path)]
    assert alerts[0].message.startswith("overfitting: the eval loss rose at 3 evaluations in a row")
