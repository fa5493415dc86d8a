"""The export pipeline as one tracked job of the run (kind "ship"): merge -> export -> the two parity jobs.

`workbench export-model` and the TUI's `x` both start it here (start_export_pipeline). Its worker
(`python -m backend.ship.pipeline`, under the one job supervisor) carries the plan out with run_export, each
step a job of its own whose spec names the pipeline as its parent, so:

- it is exclusive: one export of a run at a time (a second start names the running job and starts nothing);
- it survives the CLI or TUI that started it, and its record (state.json, output.log) says how it goes: a
  `WORKBENCH_PROGRESS` line as each step starts, and `export.json` (folder, parity) once it is done;
- stopping it (`workbench jobs RUN --stop JOB`, the TUI) stops its worker, then the step job it started.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from backend.core.collector import skip_last_collections
from backend.core.fs import file_lock, write_text_atomic
from backend.core.process_identity import JOB_MARKER_ENV
from backend.jobs.job import PROGRESS_PREFIX, JobFolder, JobKind, JobSpec, list_jobs, refresh_job, start_job
from backend.rundir.layout import RunFolder
from backend.ship.export_model import ExportPlan, ExportRefused, plan_export, run_export
from backend.ship.parity import DEFAULT_ROWS, describe, read_parity

KIND: JobKind = "ship"
RESULT_NAME = "export.json"  # in the pipeline's job folder, once it is done
LOCK_NAME = ".export.lock"


class ExportRunning(ExportRefused):
    """Another export of the run is running: nothing was started."""

    def __init__(self, job: JobFolder) -> None:
        self.job = job
        progress = job.progress()
        done = f"{progress.fraction:.0%} " if progress.fraction is not None else ""
        super().__init__(
            f"an export of this run is running: job {job.job_id} ({done}{progress.label}); nothing "
            f"was started. Wait for it, or stop it: workbench jobs {job.path.parent.parent.name} --stop "
            f"{job.job_id}"
        )


def running_export(run: RunFolder) -> JobFolder | None:
    """The run's export pipeline that is still running (its state reconciled), None when none is."""
    return next((job for job in list_jobs(run.jobs_dir, kind=KIND) if refresh_job(job).is_active), None)


def newest_export(run: RunFolder) -> JobFolder | None:
    found = list_jobs(run.jobs_dir, kind=KIND)
    return found[0] if found else None


def start_export_pipeline(
    run: RunFolder, to: str, checkpoint: int | None = None, out: Path | None = None, rows: int = DEFAULT_ROWS
) -> tuple[JobFolder, ExportPlan]:
    """Check the export (ExportRefused says why not), then start its pipeline job detached; returns at once.
    ExportRunning when another export of the run runs."""
    plan = plan_export(run, to, checkpoint, out)
    step = int(plan.checkpoint.name.rsplit("-", 1)[1])
    argv = [
        sys.executable,
        "-m",
        "backend.ship.pipeline",
        str(run.path),
        "--to",
        to,
        "--checkpoint",
        str(step),
        "--rows",
        str(rows),
        *(["--out", str(plan.target)] if out is not None else []),
    ]
    spec = JobSpec(
        kind=KIND,
        description=f"export {plan.checkpoint.name} of {run.run_id} to {to}",
        argv=argv,
        cwd=str(Path(__file__).resolve().parents[2]),
        output=str(plan.target),
        notes=plan.notes,
    )
    run.jobs_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(run.jobs_dir / LOCK_NAME, wait=10):  # the check and the start, one caller at a time
        busy = running_export(run)
        if busy is not None:
            raise ExportRunning(busy)
        return start_job(run.jobs_dir, spec), plan


def read_result(job: JobFolder) -> dict[str, Any] | None:
    """What a finished pipeline wrote (ExportResult.to_dict()); None before it is done or when unreadable."""
    try:
        data = json.loads((job.path / RESULT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def result_lines(job: JobFolder) -> list[str]:
    """What a finished pipeline says: the folder written and its parity report."""
    result = read_result(job)
    if result is None:
        return []
    report = read_parity(Path(str(result.get("folder"))))
    return [f"written: {result.get('folder')}", *(describe(report) if report else [])]


def status_line(job: JobFolder) -> str:
    """One line for the screen: the job, its status and, while it runs, its step."""
    state = refresh_job(job)
    if state.is_active:
        progress = job.progress()
        done = f"{progress.fraction:.0%} " if progress.fraction is not None else ""
        return f"export job {job.job_id}: {done}{progress.label}"
    if state.status == "finished":
        written = (read_result(job) or {}).get("folder", "")
        return f"export job {job.job_id}: finished, {written}"
    return f"export job {job.job_id}: {state.status}" + (f" ({state.failure_reason})" if state.failure_reason else "")


# ---------------------------------------------------------------- the worker, in the job's process


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="workbench export pipeline (a job's worker)")
    parser.add_argument("run")
    parser.add_argument("--to", required=True)
    parser.add_argument("--checkpoint", type=int, required=True)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    plan = plan_export(RunFolder(args.run), args.to, args.checkpoint, args.out)
    steps = (0 if plan.merged else 1) + (0 if plan.to == "merged" else 1) + 2
    started: list[str] = []

    def seen(what: str, job: JobFolder) -> None:
        started.append(what)
        print(f"{PROGRESS_PREFIX}{(len(started) - 1) / steps:.2f} {what} (job {job.job_id})", flush=True)

    result = run_export(plan, rows=args.rows, seen=seen)
    write_text_atomic(Path(os.environ[JOB_MARKER_ENV]) / RESULT_NAME, json.dumps(result.to_dict(), indent=2))
    print(f"{PROGRESS_PREFIX}1.0 done: {result.folder}", flush=True)


if __name__ == "__main__":
    skip_last_collections()  # torch and swift loaded: the end takes ~1.5 s less (backend/core/collector.py)
    _main()
