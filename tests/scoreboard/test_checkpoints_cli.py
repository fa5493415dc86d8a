"""`workbench checkpoints RUN [--json] [--pin N | --unpin N]`: hand-written expected rows on hand-made run
folders, pins that survive rotation, and one look at the shared real LoRA run (read only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from backend.cli import full_app
from backend.rundir.layout import RunFolder
from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, saved

RUNNER = CliRunner()
EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4),
          log(6, 0.25), evaluation(6, eval_loss=1.75), saved(6)]


def checkpoints(*args: str) -> tuple[int, str]:
    result = RUNNER.invoke(full_app(), ["checkpoints", *args])
    return result.exit_code, result.output


def test_table_rows(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    code, out = checkpoints(str(run.path))
    assert code == 0, out
    # EMA by hand (weight 0.9, debiased): 0.3/0.1 = 3; (0.27 + 0.1)/0.19 = 1.947; (0.333 + 0.025)/0.271 = 1.321
    assert out.splitlines() == [
        "best: checkpoint-4: lowest eval loss 1.5",
        "",
        "   checkpoint    train loss  loss EMA  eval loss  size      pinned  state",
        "   checkpoint-2  3           3         2.5        10.1 KiB          complete",
        "*  checkpoint-4  1           1.947     1.5        10.1 KiB          complete",
        "   checkpoint-6  0.25        1.321     1.75       10.1 KiB          complete",
    ]


def test_json(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    code, out = checkpoints(str(run.path), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert (data["metric"], data["basis"], data["best_step"]) == ("loss", "eval", 4)
    assert data["best_reason"] == "checkpoint-4: lowest eval loss 1.5"
    assert [(r["step"], r["train_loss"], r["eval_value"], r["size_bytes"], r["status"], r["pinned"], r["best"])
            for r in data["rows"]] == [(2, 3.0, 2.5, 10_334, "complete", False, False),
                                       (4, 1.0, 1.5, 10_334, "complete", False, True),
                                       (6, 0.25, 1.75, 10_334, "complete", False, False)]
    pinned = RUNNER.invoke(full_app(), ["checkpoints", str(run.path), "--json", "--pin", "6"])
    assert pinned.exit_code == 0 and pinned.stderr.startswith("pinned checkpoint-6: ")  # stdout stays JSON
    assert [r["pinned"] for r in json.loads(pinned.stdout)["rows"]] == [False, False, True]


def test_pin_survives_rotation_and_unpin(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True, 6: True})
    code, out = checkpoints(str(run.path), "--pin", "2")
    assert code == 0, out
    assert out.splitlines()[0] == (f"pinned checkpoint-2: {run.path}/pinned/checkpoint-2 (hard links, no extra disk "
                                   "space); save_total_limit's rotation cannot delete it")
    original = run.path / "output" / "checkpoint-2" / "adapter_model.safetensors"
    copy = run.path / "pinned" / "checkpoint-2" / "adapter_model.safetensors"
    assert copy.stat().st_ino == original.stat().st_ino
    assert json.loads((run.path / "pins.json").read_text()) == {"pinned": [2]}
    shutil.rmtree(run.path / "output" / "checkpoint-2")  # what swift's rotation does
    code, out = checkpoints(str(run.path))
    assert "   checkpoint-2  3           3         2.5        10.1 KiB  pinned (only copy)  complete" in out.splitlines()
    code, out = checkpoints(str(run.path), "--unpin", "2")
    assert code == 2 and "is the only copy of checkpoint-2 left" in out and "nothing was changed" in out
    assert copy.is_file()
    code, out = checkpoints(str(run.path), "--pin", "4")
    shutil.rmtree(run.path / "pinned" / "checkpoint-4")  # the copy deleted by hand: it protects nothing now
    assert "*  checkpoint-4  1           1.947     1.5        10.1 KiB                      complete" in \
        checkpoints(str(run.path))[1].splitlines()
    code, out = checkpoints(str(run.path), "--pin", "4")  # pinned again: the copy is made again
    assert code == 0 and (run.path / "pinned" / "checkpoint-4").is_dir()
    code, out = checkpoints(str(run.path), "--unpin", "4")
    assert code == 0, out
    assert not (run.path / "pinned" / "checkpoint-4").exists() and (run.path / "output" / "checkpoint-4").is_dir()
    assert json.loads((run.path / "pins.json").read_text()) == {"pinned": [2]}


def test_pin_refused_for_missing_or_incomplete(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: False})
    code, out = checkpoints(str(run.path), "--pin", "9")
    assert code == 2 and "has no checkpoint-9 (checkpoints: 2, 4)" in out
    code, out = checkpoints(str(run.path), "--pin", "4")
    assert code == 2 and "cannot pin an incomplete checkpoint: checkpoint-4 lacks trainer_state.json" in out
    assert not (run.path / "pins.json").exists() and not (run.path / "pinned").exists()


def test_real_run_read_only(short_lora_run: RunFolder) -> None:
    before = sorted(p.name for p in short_lora_run.path.iterdir())
    code, out = checkpoints(str(short_lora_run.path), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert [(r["name"], r["status"], r["best"]) for r in data["rows"]] == [("checkpoint-4", "complete", True)]
    row = data["rows"][0]
    # logging_steps 5 over 4 steps: the trainer logs step 1 only, so the save takes the nearest before it
    assert row["train_step"] == 1 and row["train_loss"] > 0 and row["size_bytes"] > 100_000
    assert sorted(p.name for p in short_lora_run.path.iterdir()) == before


def test_without_evaluation_the_best_is_by_the_steadier_ema_and_said_so(tmp_path: Path) -> None:
    # one noisy dip at step 4 (0.5) between losses near 1: the single train loss would pick it
    events = [log(2, 3.0), saved(2), log(4, 0.5), saved(4), *(log(step, 1.0) for step in range(5, 11)), saved(10)]
    run = fake_run(tmp_path, events, {2: True, 4: True, 10: True})
    code, out = checkpoints(str(run.path))
    assert code == 0, out
    # EMA by hand (weight 0.9, debiased): step 4 (0.27 + 0.05)/0.19 = 1.684; step 10 = 6.386/5.695 = 1.121
    assert out.splitlines()[:6] == [
        "best: checkpoint-10: lowest train loss EMA 1.121 (no evaluation in this run; the EMA, not one noisy "
        "train loss)",
        "",
        "   checkpoint     train loss  loss EMA  eval loss  size      pinned  state",
        "   checkpoint-2   3           3         -          10.1 KiB          complete",
        "   checkpoint-4   0.5         1.684     -          10.1 KiB          complete",
        "*  checkpoint-10  1           1.121     -          10.1 KiB          complete",
    ]
