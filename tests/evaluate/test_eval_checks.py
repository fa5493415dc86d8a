"""`workbench eval` refuses what it cannot do offline, before anything starts: a bad dataset line is named by its
number, a benchmark EvalScope downloads is refused; the scoreboard reads eval results back (a "swift eval" column,
the base model's score in the header line); `e` in the monitor's scoreboard without an [eval] dataset says so.
Hand-made run folders: nothing is trained or loaded (#24)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backend.checkpoints.board_text import text_lines
from backend.checkpoints.scoreboard import scoreboard
from backend.cli.app import full_app
from backend.evaluation.job import EvalRefused, lay_out, read_rows
from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, open_scoreboard, saved
from tests.scoreboard.test_scoreboard_panel import drawn_lines
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4)]


def test_bad_dataset_lines_are_named_by_number(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text('{"query": "Who are you?", "response": "Quill."}\n'
                    '{"query": "What is your name?"}\n'
                    "\n"
                    "this is not json\n"
                    '["a list"]\n'
                    '{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(EvalRefused) as refused:
        read_rows(data)
    assert str(refused.value) == (
        f"--dataset {data}: line 2: no reference answer: a question-answer row needs a text `response` (or "
        "`answer`); line 4: not valid JSON (Expecting value); line 5: not a JSON object; line 6: messages must "
        "end with the assistant's answer (the reference)")
    mcq = tmp_path / "mcq.jsonl"
    mcq.write_text('{"question": "Name?", "A": "Quill", "B": "Pen", "answer": "C"}\n')
    with pytest.raises(EvalRefused, match="line 1: `answer` must be one of the row's choices A, B, not 'C'"):
        read_rows(mcq)


def test_both_formats_laid_out_where_evalscope_reads_them(tmp_path: Path) -> None:
    qa = lay_out(FIXTURES / "quill_qa.jsonl", tmp_path / "qa")
    assert (qa.format, qa.rows, sorted(p.name for p in (tmp_path / "qa").iterdir())) == ("qa", 4, ["eval.jsonl"])
    mcq = lay_out(FIXTURES / "quill_mcq.jsonl", tmp_path / "mcq")
    assert (mcq.format, mcq.rows) == ("mcq", 2)
    rows = [json.loads(line) for line in (tmp_path / "mcq" / "eval_val.jsonl").read_text().splitlines()]
    assert rows[1] == {"question": "Which is a color?", "A": "Seven", "B": "Blue", "answer": "B"}


def test_a_benchmark_that_needs_a_download_is_refused(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    result = CliRunner().invoke(full_app(), ["eval", str(run.path), "--dataset", "gsm8k"])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert "'gsm8k' is an EvalScope benchmark that is downloaded from a hub at run time" in said
    assert "evaluates offline (HF_HUB_OFFLINE); nothing was started. Pass a local jsonl file instead" in said
    assert not run.jobs_dir.exists()
    missing = CliRunner().invoke(full_app(), ["eval", str(run.path), "--dataset", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code != 0 and f"{tmp_path / 'nope.jsonl'} does not exist" in " ".join(missing.output.split())


def _result(run_dir: Path, job: str, created: float, models: list[dict[str, Any]]) -> None:
    folder = run_dir / "jobs" / job
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({
        "dataset": "/data/quill_qa.jsonl", "format": "qa", "benchmark": "general_qa", "metric": "Rouge-L-R",
        "rows": 4, "limit": None, "evaluated": 4, "created_at": created, "models": models}))


def _model(role: str, step: int | None, score: float | None) -> dict[str, Any]:
    return {"role": role, "label": role, "step": step, "merged": False, "score": score, "metrics": {},
            "error": None if score is not None else "swift eval exited with 1"}


def test_the_scoreboard_shows_the_newest_eval_score_per_checkpoint(tmp_path: Path) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    assert "swift eval" not in text_lines(scoreboard(run))[2]  # no eval yet: no column
    _result(run.path, "a-old", 100.0, [_model("base", None, 0.125), _model("tuned", 4, 0.25)])
    _result(run.path, "b-new", 200.0, [_model("base", None, 0.1), _model("tuned", 4, 0.5)])
    _result(run.path, "c-two", 150.0, [_model("tuned", 2, 0.375)])
    _result(run.path, "d-failed", 300.0, [_model("base", None, None)])  # no score: it changes nothing
    (run.path / "jobs" / "e-bad").mkdir()
    (run.path / "jobs" / "e-bad" / "eval.json").write_text("{not json")
    lines = text_lines(scoreboard(run))
    assert lines[:5] == [
        "best: checkpoint-4: lowest eval loss 1.5 · swift eval: base Rouge-L-R 0.100 on quill_qa.jsonl",
        "",
        "   checkpoint    train loss  loss EMA  eval loss  swift eval  size      pinned  state",
        "   checkpoint-2  3           3         2.5        0.375       10.1 KiB          complete",
        "*  checkpoint-4  1           1.947     1.5        0.500       10.1 KiB          complete",
    ]
    assert lines[5].startswith(f"{run.path / 'jobs' / 'e-bad' / 'eval.json'}: damaged eval result (")


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(title, message) of every notification the app shows."""
    told: list[tuple[str, str]] = []
    original = WorkbenchApp.notify

    def notify(self: WorkbenchApp, message: str, **options: Any) -> None:
        told.append((str(options.get("title")), message))
        original(self, message, **options)

    monkeypatch.setattr(WorkbenchApp, "notify", notify)
    return told


async def test_e_without_an_eval_dataset_says_so(tmp_path: Path, isolated_runs: Path,
                                                 said: list[tuple[str, str]]) -> None:
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True}, training={})  # a profile without [eval] dataset
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        assert "e: eval" in " ".join(drawn_lines(board))
        await pilot.press("e")
        await wait_for(pilot, lambda: any(title == "Not evaluated" for title, _ in said), what="the refusal")
    [message] = [m for title, m in said if title == "Not evaluated"]
    assert message == (f"no eval dataset: the profile of {run.run_id} sets no [eval] dataset (a local jsonl of "
                       "question-answer or multiple-choice rows); set it, or run: workbench eval "
                       f"{run.run_id} --dataset FILE")
    assert not run.jobs_dir.exists()


async def test_e_starts_the_eval_job_on_the_selected_checkpoint(tmp_path: Path, isolated_runs: Path,
                                                                 said: list[tuple[str, str]]) -> None:
    from backend.jobs.job import list_jobs, stop_job
    from backend.profile import LaunchProfile, save_profile

    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    save_profile(LaunchProfile.model_validate({"name": "fake", "eval": {"dataset": str(FIXTURES / "quill_qa.jsonl")}}),
                 run.profile_path)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        await open_scoreboard(pilot, run.path)
        await pilot.press("e")  # the cursor is on checkpoint-2 (the first row)
        await wait_for(pilot, lambda: any(title in ("swift eval started", "Not evaluated") for title, _ in said),
                       what="the eval job")
    [job] = list_jobs(run.jobs_dir, kind="eval")
    try:
        assert said[-1] == ("swift eval started", f"job {job.job_id}: swift eval of /models/base and {run.run_id} "
                            "checkpoint-2 on quill_qa.jsonl; the scores appear in the swift eval column when it ends")
        plan = json.loads((job.path / "plan.json").read_text())
        assert [(m["role"], m["step"]) for m in plan["models"]] == [("base", None), ("tuned", 2)]
        assert plan["models"][1]["args"][:4] == ["--model", "/models/base", "--adapters",
                                                 str(job.path / "models" / "checkpoint-2")]
    finally:
        stop_job(job)
