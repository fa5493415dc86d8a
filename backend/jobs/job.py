"""A tracked job: one folder under a run's `jobs/`, run detached by its own supervisor.

    <run>/jobs/<job_id>/command.json   what runs (argv, env, cwd), where its result goes
    <run>/jobs/<job_id>/state.json     status, pids, times, exit code, failure reason, result
    <run>/jobs/<job_id>/output.log     stdout+stderr of the job

The job survives the CLI or TUI that started it: `python -m backend.cli.supervise job JOB_DIR`
runs in a new session, waits for the command and records how it ended. Progress is read
from the log: `WORKBENCH_PROGRESS <fraction> <label>` lines, or the spec's markers (log
substrings such as swift's "Saving merged weights...").
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from backend.core.fs import write_text_atomic
from backend.core.process_identity import JOB_MARKER_ENV, RUN_MARKER_ENV, current_boot_id, job_marker
from backend.rundir.layout import Moment, Pid, ProcessFields, StateFolder
from backend.rundir.process import start_detached, terminate
from backend.rundir.reconcile import reconcile

JobKind = Literal["merge", "infer", "export", "golden", "eval", "ship"]  # ship: the export pipeline (backend/ship)
JobStatus = Literal["starting", "running", "finished", "failed", "stopped"]
ACTIVE_JOB_STATUSES: tuple[JobStatus, ...] = ("starting", "running")
PROGRESS_PREFIX = "WORKBENCH_PROGRESS "


class JobFinishError(Exception):
    """The command succeeded but its result could not be put in place."""


class MergeFinish(BaseModel):
    """What a merge's supervisor needs to put the exported model in place (merge.finish_merge)."""

    kind: Literal["merge"] = "merge"
    temp: str  # swift export's --output_dir, a hidden folder beside the target
    target: str
    replace: bool = False
    record: dict[str, str | int | None] = Field(default_factory=dict)  # written beside the merged model

    def discard(self) -> None:
        """Remove the temporary folder of a merge that failed or was stopped (a hidden folder only)."""
        temp = Path(self.temp)
        if temp.name.startswith(".") and temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)


class InferFinish(BaseModel):
    """What a batch inference's supervisor needs to publish its results (batch_infer.finish_infer)."""

    kind: Literal["infer"] = "infer"
    partial: str
    out: str

    def discard(self) -> None:
        """Nothing: the partial results of a stopped or failed inference are kept."""


class ExportFinish(BaseModel):
    """What an export's supervisor needs to put the exported files in place (export_model.finish_export)."""

    kind: Literal["export"] = "export"
    temp: str  # the export's hidden temporary folder beside the target
    target: str

    def discard(self) -> None:
        """Remove the temporary folder of an export that failed or was stopped (a hidden folder only)."""
        temp = Path(self.temp)
        if temp.name.startswith(".") and temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)


class EvalFinish(BaseModel):
    """What an eval job's supervisor needs to report its scores (evaluate.finish_eval)."""

    kind: Literal["eval"] = "eval"
    result: str  # the job's eval.json, written by its worker

    def discard(self) -> None:
        """Nothing: a failed evaluation keeps what it wrote, for its log and its partial result."""


Finish = Annotated[MergeFinish | InferFinish | ExportFinish | EvalFinish, Field(discriminator="kind")]


class JobSpec(BaseModel):
    """What a job runs and what it produces; written once, before the job starts."""

    kind: JobKind
    description: str
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str
    output: str
    # (log substring, fraction, label): the newest one found in the log is the progress
    progress_markers: list[tuple[str, float, str]] = Field(default_factory=list)
    # the kind's data for the finishing step run by the supervisor (jobs/supervise.py); None: nothing to finish
    finish: Finish | None = None
    notes: list[str] = Field(default_factory=list)
    # the job folder whose process started this job (the export pipeline's merge and parity jobs): stopping
    # that job stops this one too; None: started by a person or a run
    parent: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_finish(cls, data: Any) -> Any:
        """A spec written before the finish data named its kind: it is the job's kind (`{}`: none)."""
        if isinstance(data, dict) and isinstance(data.get("finish"), dict) and "kind" not in data["finish"]:
            data = {**data, "finish": {**data["finish"], "kind": data.get("kind")} if data["finish"] else None}
        return data


class JobState(ProcessFields):
    job_id: str
    kind: JobKind
    status: JobStatus = "starting"
    child_pid: Pid | None = None
    child_started: Moment | None = None
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    failure_reason: str | None = None
    stop_requested: bool = False
    result: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_JOB_STATUSES

    @property
    def seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at


@dataclass
class JobProgress:
    fraction: float | None
    label: str


class JobFolder(StateFolder[JobState]):
    """Paths and small reads/writes of one job folder."""

    state_model = JobState

    @property
    def job_id(self) -> str:
        return self.path.name

    def exists(self) -> bool:
        return self.state_path.is_file() and self.command_path.is_file()

    def read_spec(self) -> JobSpec:
        return JobSpec.model_validate_json(self.command_path.read_text(encoding="utf-8"))

    def progress(self) -> JobProgress:
        state = self.read_state()
        if state.status == "finished":
            return JobProgress(1.0, "done")
        if not state.is_active:
            return JobProgress(None, state.status)
        return progress_from_log(self.log_tail(65_536), self.read_spec().progress_markers)


def progress_from_log(text: str, markers: list[tuple[str, float, str]]) -> JobProgress:
    """The newest progress line or marker in a log text."""
    best: tuple[int, JobProgress] = (-1, JobProgress(None, "starting"))
    for match in re.finditer(rf"^{PROGRESS_PREFIX}([0-9.]+) ?(.*)$", text, flags=re.MULTILINE):
        best = max(best, (match.start(), JobProgress(float(match.group(1)), match.group(2).strip())),
                   key=lambda item: item[0])
    for needle, fraction, label in markers:
        position = text.rfind(needle)
        if position > best[0]:
            best = (position, JobProgress(fraction, label))
    return best[1]


def new_job_id(kind: str) -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{kind}-{secrets.token_hex(2)}"


def create_job(jobs_dir: Path, spec: JobSpec, job_id: str | None = None) -> JobFolder:
    """Write a job folder (spec + starting state) without starting anything."""
    folder = Path(jobs_dir) / (job_id or new_job_id(spec.kind))
    folder.mkdir(parents=True, exist_ok=job_id is not None)
    job = JobFolder(folder)
    spec = spec.model_copy(update={"parent": spec.parent or _starting_job(folder)})
    write_text_atomic(job.command_path, spec.model_dump_json(indent=2))
    job.write_state(JobState(job_id=job.job_id, kind=spec.kind, boot_id=current_boot_id()))
    return job


def _starting_job(folder: Path) -> str | None:
    """The job of the same run whose process is creating this one (its marker is in our environment)."""
    starter = os.environ.get(JOB_MARKER_ENV)
    if not starter or Path(starter).resolve().parent != folder.resolve().parent:
        return None
    return str(Path(starter).resolve())


def children(job: JobFolder) -> list[JobFolder]:
    """The jobs `job` started (their spec names it as parent), newest first: its own, proven by their records."""
    mine = str(job.path.resolve())
    found = []
    for other in list_jobs(job.path.parent):
        try:
            if other.read_spec().parent == mine:
                found.append(other)
        except (OSError, ValueError):  # a damaged job folder is nobody's child
            continue
    return found


def start_job(jobs_dir: Path, spec: JobSpec, job_id: str | None = None) -> JobFolder:
    """Create the job folder and start its supervisor detached; returns at once."""
    job = create_job(jobs_dir, spec, job_id)
    argv = [sys.executable, "-m", "backend.cli.supervise", "job", str(job.path)]
    # a job started from a run's supervisor (golden prompts) is no process of the run: the run's marker is
    # blanked, so the run's stop and its straggler wait leave it alone
    env = {JOB_MARKER_ENV: str(job.path), RUN_MARKER_ENV: "", "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    try:
        pid, started = start_detached(argv, env, Path(spec.cwd), job.log_path)
    except BaseException:
        shutil.rmtree(job.path, ignore_errors=True)  # not started: no job folder says "starting" for ever
        raise
    job.update_state(supervisor_pid=pid, supervisor_started=started, started_at=time.time())
    return job


def refresh_job(job: JobFolder) -> JobState:
    """The job's state, reconciled (reconcile.py): a job whose supervisor is proven gone without a final
    status is stopped (a stop was asked) or failed, and the kind cleans up what it left."""
    return reconcile(job.read_state, job_marker(job.path), lambda lost: _conclude_lost(job, lost))


def _conclude_lost(job: JobFolder, state: JobState) -> JobState:
    spec = job.read_spec()
    if spec.finish is not None:
        spec.finish.discard()  # the kind's clean-up (e.g. a half-written merge)
    if state.stop_requested:  # killed by the stop before it could record it
        return job.update_state(status="stopped", ended_at=time.time())
    return job.update_state(status="failed", ended_at=time.time(),
                            failure_reason="the job's supervisor vanished without recording how the job ended")


def list_jobs(jobs_dir: Path, kind: JobKind | None = None) -> list[JobFolder]:
    """Jobs in a jobs folder, newest first."""
    if not Path(jobs_dir).is_dir():
        return []
    states = {}
    for folder in (p for p in Path(jobs_dir).iterdir() if p.is_dir()):
        job = JobFolder(folder)
        try:
            if job.exists():
                states[job] = job.read_state()
        except ValueError:  # a damaged job folder is skipped, never fatal for the others
            continue
    jobs = [j for j, state in states.items() if kind is None or state.kind == kind]
    return sorted(jobs, key=lambda j: states[j].created_at, reverse=True)


def stop_job(job: JobFolder) -> JobState:
    """Ask the job to stop: SIGTERM to its processes (those carrying the job's marker; the supervisor
    passes it on and cleans up), SIGKILL to any left after the grace time; then the jobs it started that still
    run (the export pipeline's merge or parity job). A job recorded on another host is not signalled from here."""
    with job.control("stop"):
        state = refresh_job(job)
        if not state.is_active or state.elsewhere():
            return state
        job.update_state(stop_requested=True)
        terminate(job_marker(job.path), grace_seconds=20.0, phases=(signal.SIGTERM, signal.SIGKILL))
    state = wait_job(job, timeout=20)
    for child in children(job):  # after the job itself: a job that is gone starts no other
        if refresh_job(child).is_active:
            stop_job(child)
    return state


def wait_job(job: JobFolder, timeout: float | None = None, poll: float = 0.2) -> JobState:
    """Block until the job ends (or `timeout` seconds pass); returns the latest state."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        state = refresh_job(job)
        if not state.is_active or (deadline is not None and time.monotonic() > deadline):
            return state
        time.sleep(poll)
