"""The runs list's summaries, kept between reloads: a reload reads only the runs whose files changed.

The runs screen reloads every 2 s and `workbench runs` lists once; both ask a `SummaryCache`.
A run's summary (`summarize`: its reconciled state and its last logged step) is kept with
the marks (backend/core/tail.py: inode, size, mtime) of its state.json, events.jsonl and queue_attempt.json (an OOM
retry's link, backend/runs/attempts.py), and used again
while both are unchanged and the run is settled: not active, so nothing but its files can change
it. An active run is summarized every reload (its processes may have gone).

The list of run folders (`index.known_folders`) is kept too, while the index file and the
workspace folder keep their marks: a run made, registered or deleted changes one of them. A mark
younger than SETTLE_SECONDS is not trusted (a change within the clock's tick leaves it as it was).

A damaged folder (state.json unreadable) is judged by its processes: one scan of the host's
processes per reload serves all of them (`process.marked_folders`), where asking each folder's
marker is a scan a folder. One that has none left is settled too, until its files change.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.paths import workspace_dir
from backend.core.process_identity import marked_folders
from backend.core.tail import FileMark, mark
from backend.rundir import index
from backend.rundir.layout import RunFolder, RunState
from backend.runs.attempts import attempt_text, link_path
from backend.runs.status import last_log_event, refresh


@dataclass
class RunSummary:
    run: RunFolder
    state: RunState
    step: int | None
    max_steps: int | None
    loss: float | None
    loss_scale: float | None
    elapsed_seconds: float | None
    eta_seconds: float | None
    attempt: str = ""  # an OOM retry's link (backend.runs.attempts): "attempt 2 of RUN, half micro-batch"


def summarize(run: RunFolder, state: RunState | None = None) -> RunSummary:
    """The run's list line. `state`: the run's state when the caller reconciled it already (the
    runs list checks damaged folders against one process scan for all of them)."""
    state = refresh(run) if state is None else state
    last = last_log_event(run)
    step = last.step if last else None
    max_steps = last.max_steps if last else None
    end = state.ended_at or time.time()
    elapsed = end - state.started_at if state.started_at else None
    eta = None
    speed = last.steps_per_second if last else None
    if state.is_active and step and max_steps and speed:
        eta = (max_steps - step) / speed
    return RunSummary(run, state, step, max_steps, last.loss if last else None, last.loss_scale if last else None,
                      elapsed, eta, attempt_text(run.path))


@dataclass(frozen=True)
class RunMarks:
    """The one "changed?" check of a run's summary: its state.json and its events.jsonl."""

    state: FileMark | None
    events: FileMark | None
    link: FileMark | None = None  # the queue's attempt link (written when a retry starts, after its run ended)


def marks_of(run: RunFolder) -> RunMarks:
    return RunMarks(mark(run.state_path), mark(run.events_path), mark(link_path(run.path)))


SETTLE_SECONDS = 2.0


@dataclass(frozen=True)
class _Listing:
    """The run folders, and the marks of the index and the workspace they were listed under."""

    marks: tuple[FileMark | None, ...]
    taken_at: float
    runs: list[RunFolder]

    def holds(self, marks: tuple[FileMark | None, ...]) -> bool:
        settled = all(m is None or m.mtime_ns / 1e9 < self.taken_at - SETTLE_SECONDS for m in marks)
        return settled and marks == self.marks


def _listing_marks() -> tuple[FileMark | None, ...]:
    return mark(index.index_path()), mark(workspace_dir())


@dataclass(frozen=True)
class Reload:
    summaries: list[RunSummary]  # active runs first, then newest first
    problems: list[str] = field(default_factory=list)  # one line per run that could not be read (the rest listed)


@dataclass
class _Scan:
    """The host's marked processes, scanned once per reload and only when a damaged folder asks."""

    found: set[str] | None = None

    def has_processes(self, run: RunFolder) -> bool:
        if self.found is None:
            self.found = marked_folders()
        return bool(self.found) and str(run.path) in self.found  # run.path is resolved: its marker's value


class SummaryCache:
    """Summaries of every run, each read again only when its files changed or while it is active."""

    def __init__(self) -> None:
        self._kept: dict[Path, tuple[RunMarks, RunSummary]] = {}
        self._listing: _Listing | None = None
        self._lock = threading.Lock()  # one reload at a time: two would read the same changes twice

    def reload(self) -> Reload:
        with self._lock:
            scan = _Scan()
            kept: dict[Path, tuple[RunMarks, RunSummary]] = {}
            problems: list[str] = []
            for run in self._runs():
                marks = marks_of(run)  # before the read: a change made during it is read next time
                if marks.state is None and not run.exists():
                    continue  # deleted since it was listed
                old = self._kept.get(run.path)
                try:
                    summary = old[1] if old and old[0] == marks and _settled(old[1]) else _summary(run, scan)
                except (OSError, ValueError) as err:  # a run folder being deleted or half-written
                    problems.append(f"{run.run_id}: {err}")
                    continue
                kept[run.path] = (marks, summary)
            self._kept = kept
        summaries = sorted((summary for _, summary in kept.values()),
                           key=lambda s: (not s.state.is_active, -s.state.created_at))
        return Reload(summaries, problems)

    def _runs(self) -> list[RunFolder]:
        marks = _listing_marks()
        if self._listing is None or not self._listing.holds(marks):
            now = time.time()
            self._listing = _Listing(marks, now, index.known_runs())
        return self._listing.runs


def _summary(run: RunFolder, scan: _Scan) -> RunSummary:
    state = run.state_or_damaged()
    if state.status == "damaged" and not scan.has_processes(run):
        return summarize(run, state)  # what status.refresh says of it, without a scan of its own
    return summarize(run)  # reconciled by status.refresh (a damaged folder whose run goes on included)


def _settled(summary: RunSummary) -> bool:
    return not summary.state.is_active
