"""The queue file: `<data dir>/queue/queue.json`, one list of entries in the order they start.

Every change is a read-modify-write under the queue lock (backend.core.fs.file_lock), written atomically,
so `workbench queue ...` commands and the keeper never lose each other's changes. A file that cannot
be read is never emptied: it is set aside as `queue.json.damaged-<time>` and said (QueueDamaged names
both files); the queue starts again empty beside it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from backend.cluster.slurm_job import JOB_ID
from backend.core.fs import file_lock, write_text_atomic
from backend.core.paths import data_dir

QUEUE_VERSION = 1
LOCK_WAIT_S = 30.0
# slurm: submitted to SLURM with `queue add --slurm` (SLURM runs it; the keeper never touches it; its state is
# squeue's, asked when listed)
EntryState = Literal["waiting", "paused", "starting", "running", "done", "slurm"]
PENDING_STATES = ("waiting", "paused", "starting", "running", "slurm")
SLURM_JOB_ID = f"^(?:{JOB_ID.pattern})$"  # backend.cluster's one rule of a job id (1001, an array task 1001_3)


class QueueDamaged(Exception):
    """The queue file could not be read; it was set aside (the message names both files)."""


class QueueRefused(ValueError):
    """A queue command was not done, with why (no such entry, already running ...)."""


class Entry(BaseModel):
    id: str
    name: str  # the run's profile name (a sweep's carries its values)
    profile_file: str  # the profile as queued (a copy: editing the original later changes nothing)
    base_dir: str  # the original profile's folder: its relative data paths resolve there
    priority: int = 0
    gpus: str = "auto"  # "auto" or "0,1"
    state: EntryState = "waiting"
    added_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    run_id: str | None = None
    run_dir: str | None = None
    outcome: str | None = None  # the run's final status (finished, failed, stopped, unknown ...)
    reason: str | None = None  # the run's failure reason
    attempt: int = 1
    parent: str | None = None  # the entry this one retries (OOM retry)
    note: str | None = None  # what was changed for this attempt, said as is
    resume_from: str | None = None  # checkpoint the retry starts from
    resumes: int = 0  # automatic resumes after a reboot
    forecast_bytes: int | None = None  # host (CPU) or per-GPU peak forecast, filled by the keeper
    peaked: bool = False  # its run logged a training step: its memory is taken (counted in what is measured free)
    gpu_ids: list[int] | None = None  # the GPUs admission gave it (a GPU machine)
    waiting_for: str | None = None  # the keeper's last reason on a GPU machine ("GPU 1: 31.2 GiB free, ...")
    # `queue add --slurm`: the job sbatch answered (state "slurm"), and the job it was submitted after
    # (--dependency=afterany:<it>); only job ids: they reach scancel's and sbatch's command lines
    slurm_job_id: str | None = Field(None, pattern=SLURM_JOB_ID)
    slurm_dependency: str | None = Field(None, pattern=SLURM_JOB_ID)
    sweep: str | None = None  # the profile's name whose [sweep] made this entry (its runs are compared and ranked)
    sweep_id: str | None = None  # one `queue add` of that sweep (a name queued twice is two sweeps)

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES


class QueueFile(BaseModel):
    v: int = QUEUE_VERSION
    entries: list[Entry] = Field(default_factory=list)

    def find(self, ref: str) -> Entry:
        """An entry by id (or a unique start of one); QueueRefused naming what exists otherwise."""
        exact = [e for e in self.entries if e.id == ref]
        found = exact or [e for e in self.entries if e.id.startswith(ref)]
        if len(found) == 1:
            return found[0]
        known = ", ".join(e.id for e in self.entries if e.pending) or "none"
        why = "matches several entries" if found else "is no queue entry"
        raise QueueRefused(f"{ref!r} {why}; queued: {known} (see `workbench queue`)")

    def pending(self) -> list[Entry]:
        return [e for e in self.entries if e.pending]

    def keeps_keeper(self) -> bool:
        """Whether the keeper has work: an entry waiting, starting or running (paused ones wait for a
        `queue resume`, which starts the keeper again)."""
        return any(e.state in ("waiting", "starting", "running") for e in self.entries)


def queue_dir() -> Path:
    return data_dir() / "queue"


def queue_path(folder: Path | None = None) -> Path:
    return (folder or queue_dir()) / "queue.json"


def new_entry_id() -> str:
    return f"q{secrets.token_hex(3)}"


def read_queue(folder: Path | None = None) -> QueueFile:
    """The queue as it is now (no lock: a reader sees the old or the new file). A damaged file is
    set aside and QueueDamaged raised; only a writer under the lock does that (see `edit`)."""
    path = queue_path(folder)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return QueueFile()
    try:
        return QueueFile.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        raise QueueDamaged(f"{path} cannot be read ({_first_line(err)})") from None


def _first_line(err: Exception) -> str:
    if isinstance(err, ValidationError) and err.errors():
        first = err.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _set_aside(path: Path, why: str) -> str:
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.replace(path, aside)
    return (f"{why}; it was set aside as {aside} (nothing deleted) and the queue starts empty: re-add the "
            f"profiles listed there with `workbench queue add`")


@contextmanager
def edit(folder: Path | None = None, wait: float | None = None) -> Iterator[QueueFile]:
    """Read-modify-write the queue under its lock (LockTimeout after `wait` s, LOCK_WAIT_S unless given); the
    changed queue is written when the block ends without error. A damaged file is set aside (QueueDamaged after
    that, saying where)."""
    folder = folder or queue_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / "queue.lock", wait=LOCK_WAIT_S if wait is None else wait):
        try:
            queue = read_queue(folder)
        except QueueDamaged as err:
            raise QueueDamaged(_set_aside(queue_path(folder), str(err))) from None
        yield queue
        write_text_atomic(queue_path(folder), queue.model_dump_json(indent=2))


def insert_by_priority(queue: QueueFile, entry: Entry, after: Entry | None = None) -> None:
    """Place `entry` right after `after` when given (a retry follows its failed attempt), else after
    every pending entry of the same or a higher priority."""
    if after is not None and after in queue.entries:
        queue.entries.insert(queue.entries.index(after) + 1, entry)
        return
    index = len(queue.entries)
    for i, other in enumerate(queue.entries):
        if other.state in ("waiting", "paused") and other.priority < entry.priority:
            index = i
            break
    queue.entries.insert(index, entry)


def move(queue: QueueFile, entry: Entry, step: int) -> None:
    """Move a waiting or paused entry one place up (-1) or down (+1) among the waiting and paused ones."""
    if entry.state not in ("waiting", "paused"):
        raise QueueRefused(f"{entry.id} is {entry.state}: only waiting or paused entries move")
    movable = [e for e in queue.entries if e.state in ("waiting", "paused")]
    i = movable.index(entry)
    j = i + step
    if not 0 <= j < len(movable):
        raise QueueRefused(f"{entry.id} is already {'first' if step < 0 else 'last'} in the queue")
    a, b = queue.entries.index(movable[i]), queue.entries.index(movable[j])
    queue.entries[a], queue.entries[b] = queue.entries[b], queue.entries[a]


def change(ref: str, what: str, folder: Path | None = None,
           cancel: Callable[[Entry], str] | None = None) -> Entry:
    """`rm`, `up`, `down`, `pause` or `resume` the entry `ref`, under the lock; the entry. QueueRefused
    with why when that entry's state does not allow it (a running one is stopped as a run). `cancel`: how a
    SLURM entry's job is cancelled before it is removed (backend.queue.changes gives scancel)."""
    with edit(folder) as queue:
        entry = queue.find(ref)
        if what == "rm":
            if entry.state == "slurm" and entry.slurm_job_id:
                if cancel is None:
                    raise QueueRefused(f"{entry.id} is SLURM job {entry.slurm_job_id}: `workbench queue rm "
                                       f"{entry.id}` cancels it")
                entry.reason = cancel(entry)  # raises (the entry stays) when it cannot
            if entry.state in ("running", "starting"):
                raise QueueRefused(f"{entry.id} is {entry.state} as run {entry.run_id}: `workbench stop "
                                   f"{entry.run_id}` stops it (the keeper then moves on)")
            queue.entries.remove(entry)
        elif what in ("up", "down"):
            move(queue, entry, -1 if what == "up" else 1)
        elif what == "pause":
            if entry.state != "waiting":
                raise QueueRefused(f"{entry.id} is {entry.state}: only a waiting entry pauses")
            entry.state = "paused"
        elif what == "resume":
            if entry.state != "paused":
                raise QueueRefused(f"{entry.id} is {entry.state}: only a paused entry resumes")
            entry.state = "waiting"
        else:
            raise QueueRefused(f"unknown queue change {what!r}")
    return entry
