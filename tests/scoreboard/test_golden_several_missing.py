"""Several checkpoints saved between two looks of the golden keeper (#36): one golden job answers every one
of them, not only the newest. `workbench golden RUN` asks the same question the keeper asks at its tick
(start_golden with no steps), and says which checkpoints its job answers."""

from __future__ import annotations

import json
from pathlib import Path

from backend.golden.answers import PROMPTS_COPY, golden_dir
from backend.jobs.job import list_jobs, stop_job
from backend.rundir import index
from tests.faults import helpers as h
from tests.scoreboard.golden_helpers import ANSWERS, PROMPTS, write_answers
from tests.scoreboard.scoreboard_helpers import fake_run, log, saved

STEPS = (2, 4, 6, 8)


def test_one_golden_job_answers_every_checkpoint_still_without_answers(isolated_runs: Path) -> None:
    events = [e for step in STEPS for e in (log(step, 1.0), saved(step))]
    run = fake_run(isolated_runs, events, {**{step: True for step in STEPS}, 10: False})  # 10: half written
    write_answers(run, "base", ANSWERS["base"])
    write_answers(run, "checkpoint-4", ANSWERS["checkpoint-4"])  # answered at an earlier tick
    (golden_dir(run) / PROMPTS_COPY).write_text("".join(
        json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n" for prompt, _ in PROMPTS))
    index.register(run.path)

    result = h.cli("golden", run.run_id)
    try:
        assert result.exit_code == 0, result.output
        assert "golden prompts answered by checkpoint-2, checkpoint-6, checkpoint-8\n" in result.output
        (job,) = list_jobs(run.jobs_dir, kind="golden")
        argv = job.read_spec().argv
        targets = json.loads(argv[argv.index("--targets") + 1])
        assert [(t["label"], Path(t["checkpoint"]).name) for t in targets] == [
            ("checkpoint-2", "checkpoint-2"), ("checkpoint-6", "checkpoint-6"), ("checkpoint-8", "checkpoint-8")]
    finally:
        for job in list_jobs(run.jobs_dir, kind="golden"):
            stop_job(job)
