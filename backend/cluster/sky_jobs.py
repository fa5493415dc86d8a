"""SkyPilot managed jobs through the `sky` CLI (#40 item 2): submit, state, cancel.

- `submit`: `sky jobs launch TASK --name NAME --secret S... --yes --detach-run`; the job id is read from
  SkyPilot's "Job submitted, ID: N" line (digits only are believed).
- `job_states`: `sky jobs queue --all --output json` (this user's managed jobs), at most every SKY_EVERY_S,
  bounded by SKY_TIMEOUT_S: job id -> SkyJob (status, recoveries, SkyPilot's failure reason).
- `cancel`: `sky jobs cancel --yes ID` (that job only).

Hostile values: a job id is digits or nothing; a status that is not one of SkyPilot's words is shown as
"unknown" with the word escaped; names and reasons go through `visible`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from backend.core.safe_text import visible

SUBMIT_TIMEOUT_S = 600.0  # the first job also starts SkyPilot's jobs controller
SKY_TIMEOUT_S = 60.0
SKY_EVERY_S = 10.0
JOB_ID = re.compile(r"\d{1,12}")
SUBMITTED = re.compile(r"Job submitted, ID: (\d{1,12})\b")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# SkyPilot's managed job statuses (sky/jobs/state.py ManagedJobStatus)
ACTIVE = ("PENDING", "SUBMITTED", "STARTING", "RUNNING", "RECOVERING", "CANCELLING", "WINDING_DOWN")
ENDED = ("SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP", "FAILED_PRECHECKS", "FAILED_NO_RESOURCE",
         "FAILED_CONTROLLER")
_last_answer: tuple[float, dict[str, SkyJob]] | None = None


class SkyUnavailable(RuntimeError):
    """`sky` is not on PATH, did not answer in time, or refused (the message says which)."""


@dataclass(frozen=True)
class SkyJob:
    job_id: str
    name: str
    status: str  # one of ACTIVE or ENDED, or "unknown (WORD)"
    recoveries: int
    failure_reason: str | None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    def describe(self) -> str:
        """E.g. "SkyPilot job 7: RUNNING, recovered 1 time on another instance"."""
        said = f"SkyPilot job {self.job_id}: {self.status}"
        if self.status == "RECOVERING":
            said += " (its instance was preempted or lost: SkyPilot is starting it on another)"
        if self.recoveries:
            said += f", recovered {self.recoveries} time{'s' if self.recoveries != 1 else ''} on another instance"
        if self.failure_reason and self.status not in ("RUNNING", "SUCCEEDED"):
            said += f" ({self.failure_reason})"
        return said


def tool() -> str:
    path = shutil.which("sky")
    if path is None:
        raise SkyUnavailable('`sky` is not on PATH: install SkyPilot (pip install -e ".[cloud]") and run `sky check`')
    return path


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              errors="replace")
    except subprocess.TimeoutExpired:
        raise SkyUnavailable(f"`sky {' '.join(argv[1:3])}` did not answer in {timeout:.0f} s") from None
    except OSError as err:
        raise SkyUnavailable(f"`sky` could not be run: {visible(err, 200)}") from None


def _said(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in ANSI.sub("", result.stderr or result.stdout or "").splitlines() if line.strip()]
    return visible(lines[-1].strip(), 300) if lines else f"exit status {result.returncode}"


def submit(task_path: str, *, name: str, secrets: list[str]) -> str:
    """Launch the task as a managed job; its job id. SkyUnavailable when sky refuses or says no id."""
    argv = [tool(), "jobs", "launch", task_path, "--name", name, *[w for s in secrets for w in ("--secret", s)],
            "--yes", "--detach-run"]
    result = _run(argv, SUBMIT_TIMEOUT_S)
    found = SUBMITTED.search(ANSI.sub("", result.stdout + "\n" + result.stderr))
    if result.returncode != 0 or found is None:
        raise SkyUnavailable(f"sky jobs launch did not submit the job: {_said(result)}")
    return found.group(1)


def job_states(fresh: bool = False) -> dict[str, SkyJob]:
    """This user's managed jobs as `sky jobs queue` lists them; an answer under SKY_EVERY_S old is used again
    unless `fresh`."""
    global _last_answer
    if not fresh and _last_answer is not None and time.monotonic() - _last_answer[0] < SKY_EVERY_S:
        return _last_answer[1]
    result = _run([tool(), "jobs", "queue", "--all", "--output", "json"], SKY_TIMEOUT_S)
    if result.returncode != 0:
        raise SkyUnavailable(f"sky jobs queue failed: {_said(result)}")
    try:
        records = json.loads(result.stdout)
    except ValueError:
        raise SkyUnavailable("sky jobs queue answered something that is not JSON") from None
    jobs = {}
    for record in records if isinstance(records, list) else []:
        job = _job(record)
        if job is not None:
            jobs[job.job_id] = job
    _last_answer = (time.monotonic(), jobs)
    return jobs


def _job(record: object) -> SkyJob | None:
    if not isinstance(record, dict):
        return None
    job_id = record.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, (int, str)) or not JOB_ID.fullmatch(str(job_id)):
        return None
    status = record.get("status")
    status = status if status in ACTIVE or status in ENDED else f"unknown ({visible(status, 40)})"
    recoveries = record.get("recovery_count")
    reason = record.get("failure_reason")
    return SkyJob(str(job_id), visible(record.get("job_name") or "", 80), status,
                  recoveries if isinstance(recoveries, int) and not isinstance(recoveries, bool) else 0,
                  visible(reason, 300) if isinstance(reason, str) and reason else None)


def cancel(job_id: str) -> str:
    """`sky jobs cancel --yes <job_id>`; what was done, said. SkyUnavailable when it cannot."""
    if not JOB_ID.fullmatch(job_id):
        raise SkyUnavailable(f"not a SkyPilot job id: {visible(job_id, 40)}")
    result = _run([tool(), "jobs", "cancel", "--yes", job_id], SKY_TIMEOUT_S)
    if result.returncode != 0:
        raise SkyUnavailable(f"sky jobs cancel {job_id} failed: {_said(result)}")
    return f"SkyPilot job {job_id} cancelled (sky jobs cancel {job_id})"


JOB_FILE_NAME = "sky_job.json"  # in a run's local folder: the managed job it was submitted as


def job_id_of(run_dir: Path) -> str | None:
    """The SkyPilot job id a run was submitted as (digits only are believed); None without one."""
    try:
        content = json.loads((Path(run_dir) / JOB_FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    job_id = content.get("job_id") if isinstance(content, dict) else None
    return job_id if isinstance(job_id, str) and JOB_ID.fullmatch(job_id) else None
