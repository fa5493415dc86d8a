"""`workbench jobs RUN` in an 80-column terminal prints every job id whole, so it can be copied (#41)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.jobs.job import JobSpec, create_job
from tests.faults import helpers as h
from tests.timing import scaled


@pytest.mark.parametrize("columns", ["60", "80", "120"])
def test_jobs_prints_ids_whole_in_a_narrow_terminal(isolated_runs: Path, tmp_path: Path, columns: str) -> None:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    run = h.fake_run(isolated_runs, "20261201-232000-quill-1f0e")
    spec = JobSpec(kind="infer", description="golden prompts", argv=["true"], cwd=str(tmp_path),
                   output=str(run.path / "golden"))
    job_id = "20261201-232916-golden-2a7c"  # as new_job_id("golden") names one
    job = create_job(run.jobs_dir, spec, job_id=job_id)
    answers = run.path / "golden" / "answers-of-checkpoint-40-against-the-base-model-and-the-reference.jsonl"
    job.update_state(status="finished", ended_at=time.time(), result=str(answers))  # one long word
    # a fresh process, as in the user's terminal: the console's width is read from COLUMNS when it starts (in
    # process, the console object an earlier test of the same worker made kept its own width once)
    result = subprocess.run([sys.executable, "-m", "backend.cli", "jobs", run.run_id], capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": columns}, timeout=scaled(60))
    assert result.returncode == 0, result.stdout + result.stderr
    result_output = result.stdout
    lines = result_output.splitlines()
    assert any(line.strip().startswith(job_id + " ") for line in lines), result_output
    assert all(len(line) <= int(columns) for line in lines), result_output
    assert "".join(line[line.index("finished") + 20:].strip() if "finished" in line else line.strip()
                   for line in lines[1:]).endswith(answers.name)  # the path folded, whole
