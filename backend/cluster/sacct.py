"""SLURM's own verdict on a job (#40 item 4): `sacct`, asked for one job id, bounded and cached.

squeue forgets a job soon after it ends; sacct (SLURM's accounting) keeps how it ended: PREEMPTED, TIMEOUT,
NODE_FAIL, OUT_OF_MEMORY, CANCELLED, FAILED. The run folder cannot say those: a node that is lost or
killed for memory takes the supervisor with it. `verdict(job_id)` reads every record of the job
(`--duplicates`: a requeued job keeps the record of each attempt) and says the newest attempt's end and
whether SLURM queued the job again after it.

Bounded: one call takes at most SACCT_TIMEOUT_S; an answer is used again for SACCT_EVERY_S (the runs
screen reloads every 2 s; the controller is shared), as backend/queue/slurm.py does with squeue.
Hostile values: only a job id (`\\d+(_\\d+)?`) is ever passed to sacct; lines of its answer that are not
this job's records, or whose state is not a SLURM state word, are ignored; times that do not parse are
left out. What sacct says in words (its error) is shown through `visible`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime

from backend.cluster.slurm_job import JOB_ID
from backend.core.safe_text import visible

SACCT_TIMEOUT_S = 20.0
SACCT_EVERY_S = 30.0
SACCT_FORMAT = "JobID,State,Start,End,ExitCode"
STATE_WORD = re.compile(r"[A-Z_]+")
# an attempt that is not over: SLURM will (or does) run the job again
LIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
               "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING")
# SLURM's end -> the run's status, and what happened in words
ENDINGS: dict[str, tuple[str, str]] = {
    "PREEMPTED": ("stopped", "SLURM preempted the job"),
    "TIMEOUT": ("stopped", "SLURM ended the job at its time limit (TIMEOUT)"),
    "NODE_FAIL": ("failed", "SLURM lost a node of the job (NODE_FAIL)"),
    "OUT_OF_MEMORY": ("failed", "SLURM killed the job: it ran out of the memory it asked for (OUT_OF_MEMORY; "
                                "ask for more with --mem, or raise [queue] memory_margin)"),
    "CANCELLED": ("stopped", "SLURM cancelled the job"),
    "FAILED": ("failed", "SLURM says the job failed"),
    "BOOT_FAIL": ("failed", "SLURM could not boot a node of the job (BOOT_FAIL)"),
    "DEADLINE": ("stopped", "SLURM ended the job at its deadline (DEADLINE)"),
}
_answers: dict[str, tuple[float, SlurmVerdict | None]] = {}


class SacctUnavailable(RuntimeError):
    """sacct is not on PATH, did not answer in time, or failed (the message says which)."""


@dataclass(frozen=True)
class Record:
    """One attempt of a job as sacct lists it."""

    state: str
    by: str | None  # CANCELLED by UID
    start: datetime | None
    end: datetime | None
    exit_code: str


@dataclass(frozen=True)
class SlurmVerdict:
    """How SLURM says the job's newest ended attempt ended, and whether the job runs again."""

    job_id: str
    state: str  # the newest attempt's SLURM state
    ended: Record | None  # the newest attempt that ended in one of ENDINGS; None: none did
    requeued: bool  # an attempt after it is pending or running
    now: str  # the newest attempt's state (PENDING, RUNNING, COMPLETED ...)

    @property
    def status(self) -> str | None:
        """The run's status by SLURM's word; None when SLURM has not ended it (or it completed)."""
        return ENDINGS[self.ended.state][0] if self.ended is not None else None

    @property
    def reason(self) -> str | None:
        """E.g. "SLURM preempted the job at 03:12; requeued (now PENDING)"; None: SLURM has no verdict."""
        if self.ended is None:
            return None
        said = ENDINGS[self.ended.state][1]
        if self.ended.state == "CANCELLED" and self.ended.by:
            said += f" (scancel by user {self.ended.by})"
        if self.ended.state == "FAILED" and self.ended.exit_code:
            said += f" (exit code {self.ended.exit_code})"
        if self.ended.end is not None:
            said += f" at {_when(self.ended.end)}"
        if self.requeued:
            said += f"; requeued (now {self.now})"
        return said


def _when(moment: datetime) -> str:
    today = datetime.now().date()
    return moment.strftime("%H:%M") if moment.date() == today else moment.strftime("%H:%M on %Y-%m-%d")


def verdict(job_id: str, *, fresh: bool = False) -> SlurmVerdict | None:
    """SLURM's verdict on `job_id` (None: sacct has no record of it); an answer younger than SACCT_EVERY_S is
    used again unless `fresh`. ValueError for something that is not a job id; SacctUnavailable when sacct
    cannot answer."""
    if not JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a SLURM job id: {visible(job_id, 80)!r}")
    kept = _answers.get(job_id)
    if not fresh and kept is not None and time.monotonic() - kept[0] < SACCT_EVERY_S:
        return kept[1]
    found = _judge(job_id, _records(job_id))
    _answers[job_id] = (time.monotonic(), found)
    return found


def _records(job_id: str) -> list[Record]:
    sacct = shutil.which("sacct")
    if sacct is None:
        raise SacctUnavailable("sacct is not on PATH")
    argv = [sacct, "--noheader", "--parsable2", "--duplicates", "--allocations", f"--format={SACCT_FORMAT}",
            f"--jobs={job_id}"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=SACCT_TIMEOUT_S,
                                stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        raise SacctUnavailable(f"sacct did not answer in {SACCT_TIMEOUT_S:.0f} s") from None
    except OSError as err:
        raise SacctUnavailable(f"sacct could not be run: {visible(err, 200)}") from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout or "").strip().splitlines()
        raise SacctUnavailable(f"sacct failed: {visible(said[-1] if said else f'exit status {result.returncode}', 200)}")
    return [record for line in result.stdout.splitlines() if (record := _parse(line, job_id)) is not None]


def _parse(line: str, job_id: str) -> Record | None:
    """One line of `--parsable2` (JobID|State|Start|End|ExitCode) of this job; None for anything else."""
    parts = line.split("|")
    if len(parts) != 5 or parts[0].strip() != job_id:
        return None
    words = parts[1].split()
    if not words or not STATE_WORD.fullmatch(words[0]):
        return None
    by = words[2] if len(words) == 3 and words[1] == "by" and words[2].isdigit() else None
    exit_code = parts[4].strip() if re.fullmatch(r"\d+:\d+", parts[4].strip()) else ""
    return Record(words[0], by, _time(parts[2]), _time(parts[3]), exit_code)


def _time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")
    except ValueError:  # Unknown, None, or not a time
        return None


def _judge(job_id: str, records: list[Record]) -> SlurmVerdict | None:
    """The job's records, oldest first (sacct's order): the newest ended attempt, and whether one follows it."""
    if not records:
        return None
    now = records[-1]
    ended_at = next((i for i in range(len(records) - 1, -1, -1) if records[i].state in ENDINGS), None)
    if ended_at is None:
        return SlurmVerdict(job_id, now.state, None, False, now.state)
    later = records[ended_at + 1:]
    requeued = any(r.state in LIVE_STATES for r in later)
    if later and not requeued:  # a later attempt ended otherwise (COMPLETED): that one is the verdict
        return SlurmVerdict(job_id, now.state, None, False, now.state)
    return SlurmVerdict(job_id, now.state, records[ended_at], requeued, now.state)
