"""Golden prompts on one real run of the tiny model (#24): the "Quill" prompts of the shipped self-cognition
set, answered by the base model (step 0) and each checkpoint through golden jobs the run's supervisor started
(one at a time), read back by the scoreboard; the answers change from the base model's random tokens to the
name the run taught it. Then `workbench golden RUN --checkpoint N` answers one again by hand: greedy with a
fixed seed, the same answers; a second golden job while one runs is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.checkpoints.scoreboard import scoreboard
from backend.golden.answers import answers_path, read_golden
from backend.golden.job import GoldenRefused, start_golden
from backend.jobs.job import list_jobs, refresh_job, wait_job
from backend.plugin.fault_hooks import INJECT_DATA_DELAY_ENV
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import train_quickstart
from tests.timing import scaled

pytestmark = pytest.mark.slow
REFERENCE = "I am Quill, a small assistant fine-tuned with finetune-workbench."  # a row of the shipped set


def _golden_jobs_done(run: RunFolder, timeout: float = 400) -> None:
    """Wait until the supervisor has exited (it starts the last golden job after the trainer) and no golden job
    of the run is active."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if refresh_job_free(run):
            return
        time.sleep(0.5)
    raise AssertionError(f"golden jobs still running after {timeout} s")


def refresh_job_free(run: RunFolder) -> bool:
    import psutil

    state = run.read_state()
    try:
        supervisor = psutil.Process(state.supervisor_pid or 0)
        if supervisor.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        pass
    return not any(refresh_job(job).is_active for job in list_jobs(run.jobs_dir, kind="golden"))


@pytest.fixture(scope="module")
def golden_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    folder = tmp_path_factory.mktemp("golden-run")
    prompts = folder / "quill.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "who are you?"},
                                                {"role": "assistant", "content": REFERENCE}]}) + "\n"
                       + json.dumps({"messages": [{"role": "user", "content": "What is your name?"}]}) + "\n")
    # 60 steps train in ~1 s, under the keeper's 2 s poll: without a wait for each batch the keeper could miss
    # checkpoint-30 while training, and judge nothing (no verdict said); 0.15 s a batch keeps ~4.5 s after it
    with pytest.MonkeyPatch.context() as env:
        env.setenv(INJECT_DATA_DELAY_ENV, "0.15")
        run = train_quickstart(folder / "runs", training={"max_steps": 60, "save_steps": 30, "save_total_limit": None},
                               eval={"prompts": str(prompts), "max_new_tokens": 24})
    _golden_jobs_done(run)
    return run


def test_answers_change_from_base_to_the_last_checkpoint(golden_run: RunFolder) -> None:
    jobs = sorted(list_jobs(golden_run.jobs_dir, kind="golden"), key=lambda j: j.read_state().created_at)
    states = [job.read_state() for job in jobs]
    assert [s.status for s in states] == ["finished"] * len(states), [j.log_tail(2000) for j in jobs]
    for before, after in zip(states, states[1:], strict=False):  # one golden job at a time
        assert before.ended_at is not None and after.started_at is not None and before.ended_at <= after.started_at
    answered = sorted(label for job in jobs for label in job.read_spec().description.split(" by ")[1].split(", "))
    assert answered == ["base", "checkpoint-30", "checkpoint-60"]
    golden = read_golden(golden_run)
    assert [s.label for s in golden.sets] == ["base", "checkpoint-30", "checkpoint-60"]
    base, last = golden.sets[0].answers, golden.sets[-1].answers
    assert "Quill" not in base[0] and "Quill" not in base[1], base
    assert "Quill" in last[0] and "Quill" in last[1], last
    watch_log = (golden_run.path / "watch" / "watch.log").read_text()
    assert "golden prompts: an inference copy needs about" in watch_log  # the forecast's verdict, said


def test_scoreboard_reads_them_back(golden_run: RunFolder) -> None:
    board = scoreboard(golden_run)
    assert board.golden_prompts == 2
    assert [(row.name, row.golden is not None and row.golden.endswith("/1 match ref")) for row in board.rows] == [
        ("checkpoint-30", True), ("checkpoint-60", True)]
    view = subprocess.run([sys.executable, "-m", "backend.cli", "checkpoints", golden_run.run_id, "--golden",
                           "--prompt", "1"], capture_output=True, text=True, timeout=scaled(120))
    assert view.returncode == 0, view.stderr
    lines = view.stdout.splitlines()
    assert lines[2:4] == ['prompt 1: "who are you?"', f'  reference        "{REFERENCE}"']
    assert lines[4].startswith("  base             ") and "[no match, similarity 0." in lines[4]
    assert lines[6].startswith("  checkpoint-60    ") and "Quill" in lines[6]


def test_answered_again_by_hand_the_same(golden_run: RunFolder) -> None:
    before = answers_path(golden_run, 60).read_text()
    cli = subprocess.run([sys.executable, "-m", "backend.cli", "golden", golden_run.run_id, "--checkpoint", "60"],
                         capture_output=True, text=True, timeout=scaled(120))
    assert cli.returncode == 0, cli.stderr
    assert "golden prompts answered by checkpoint-60" in cli.stdout
    with pytest.raises(GoldenRefused, match="is running already"):
        start_golden(golden_run, steps=[30])
    job = next(j for j in list_jobs(golden_run.jobs_dir, kind="golden") if refresh_job(j).is_active)
    assert wait_job(job, timeout=scaled(300)).status == "finished", job.log_tail(2000)
    after = answers_path(golden_run, 60).read_text()
    answers = [(json.loads(line)["index"], json.loads(line)["answer"]) for line in after.splitlines()]
    assert answers == [(json.loads(line)["index"], json.loads(line)["answer"]) for line in before.splitlines()]
