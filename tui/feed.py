"""What the monitor knows about one run, read from its folder only, incrementally.

`RunFeed.poll()` runs in a thread worker: it reads the new bytes of events.jsonl (into a
MetricsStore) and of output.log (into a bounded tail), and the run's state. The screen reads
the results on the UI thread; the store has its own lock, the log tail hands over new lines
through a thread-safe queue. No Textual here.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.runs.diagnose import EXCEPTION_LINE, Diagnosis, diagnose_log
from backend.runs.layout import RunFolder, RunState
from backend.runs.manager import refresh
from backend.series import BATCH_BYTES, ColumnReader, MetricsStore
from backend.series_summary import SAVE_EVERY_BYTES, restore_or_read, save_summary

LOG_LINES_KEPT = 400
LOG_START_BYTES = 64 * 1024  # a first look at a long log starts this far from its end
WARNING_LINE = re.compile(r"\bWARNING\b|\bWarning:|UserWarning|FutureWarning")
SPECIFIC_KINDS = ("oom", "host_oom", "nan", "ddp_reentrant", "port_in_use")


@dataclass(frozen=True)
class LogLine:
    text: str
    level: str  # "error" | "warning" | ""


def classify(line: str, in_traceback: bool) -> str:
    if in_traceback or line.startswith("Traceback") or EXCEPTION_LINE.match(line) or diagnose_log(line):
        return "error"
    return "warning" if WARNING_LINE.search(line) else ""


class LogFollower:
    """The newest lines of a growing log file, read from where the last read ended."""

    def __init__(self, path: Path, keep: int = LOG_LINES_KEPT, start_bytes: int = LOG_START_BYTES):
        self.path = path
        self.keep = keep
        self.start_bytes = start_bytes
        self.offset: int | None = None  # None: not opened yet
        self.lines: deque[LogLine] = deque(maxlen=keep)
        self.pending: deque[LogLine] = deque(maxlen=keep)  # new since the UI last took them
        self._partial = b""
        self._in_traceback = False
        self._lock = threading.Lock()

    def read_new(self, max_bytes: int = 1 << 20) -> int:
        """Read what was appended; returns how many complete lines arrived."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return 0
        if self.offset is None or size < self.offset:  # first look, or the file was truncated
            self.offset, self._partial = max(0, size - self.start_bytes), b""
            skip_first = self.offset > 0  # we start mid-line
        else:
            skip_first = False
        if size == self.offset:
            return 0
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read(max_bytes)
        self.offset += len(chunk)
        complete, _, self._partial = (self._partial + chunk).rpartition(b"\n")
        raw_lines = complete.decode("utf-8", errors="replace").split("\n") if complete else []
        if skip_first and raw_lines:
            raw_lines = raw_lines[1:]
        new = [self._line(raw) for raw in raw_lines]
        with self._lock:
            self.lines.extend(new)
            self.pending.extend(new)
        return len(new)

    def _line(self, raw: str) -> LogLine:
        # progress bars rewrite their line with \r: the last state is what a terminal shows
        text = next((part for part in reversed(raw.split("\r")) if part.strip()), "").rstrip()
        if text.startswith("Traceback (most recent call last)"):
            self._in_traceback = True
        level = classify(text, self._in_traceback)
        if self._in_traceback and EXCEPTION_LINE.match(text) and not text.startswith(" "):
            self._in_traceback = False  # the exception line closes the traceback
        return LogLine(text, level)

    def take_pending(self) -> list[LogLine]:
        with self._lock:
            taken = list(self.pending)
            self.pending.clear()
        return taken

    def text(self) -> str:
        with self._lock:
            return "\n".join(line.text for line in self.lines)


def pick_diagnosis(diagnoses: list[Diagnosis]) -> Diagnosis | None:
    """The one worth a line: the newest specific problem, else a signal, else the last exception."""
    for kinds in (SPECIFIC_KINDS, ("signal",), ("exception",)):
        found = [d for d in diagnoses if d.kind in kinds]
        if found:
            return found[-1]
    return None


class RunFeed:
    """The run folder, read incrementally: events into a store, the log into a tail, the state."""

    def __init__(self, run_dir: Path, store: MetricsStore | None = None):
        self.run = RunFolder(run_dir)
        self.store = store or MetricsStore()
        # a store of our own starts from the run's events summary when it is valid (first read)
        self.reader: ColumnReader | None = None if store is None else ColumnReader(self.run.events_path)
        self.start: str | None = None  # how the first read started: "summary of the first N bytes" or why not
        self._may_summarise = False  # our own store read the file from its start, and no summary came of it yet
        self.log = LogFollower(self.run.log_path)
        self.state: RunState | None = None
        self.state_error: str | None = None
        self.diagnosis: Diagnosis | None = None

    def poll(self, report: Callable[[float], None] | None = None, cancelled: Callable[[], bool] | None = None,
             report_every: float = 0.5) -> bool:
        """Read events to the end of the file (a long backlog whole, `report(fraction read)` every
        `report_every` s meanwhile), then the new log lines and the state once. True if anything changed."""
        changed, last_report = False, 0.0  # the first report comes after the first batch
        while not (cancelled and cancelled()):
            changed = self.read_events() or changed
            if not self.has_backlog():
                break
            if report and time.monotonic() - last_report > report_every:
                report(self.read_fraction())
                last_report = time.monotonic()
        changed = self._read_log_and_state() or changed
        self._summarise_an_ended_run()
        return changed

    def read_events(self, max_bytes: int = BATCH_BYTES) -> bool:
        """At most `max_bytes` of new events into the store; True if it held any (or damaged lines).
        The first read restores the run's events summary (backend.series_summary) when it is valid."""
        if self.reader is None:
            self.reader, self.start = restore_or_read(self.run.events_path, self.store)
            if self.reader.offset:
                return True
            self._may_summarise = True
        return self.store.ingest_batch(self.reader.read_batch(max_bytes)) > 0

    def _summarise_an_ended_run(self) -> None:
        """A run that has no valid summary (made before summaries, or by another version) and no
        supervisor left to keep one gets one from this read, so that its next open is fast. Only for a
        proven run folder of the workbench, and only once; a folder that cannot be written is left as is."""
        if not self._may_summarise or self.reader is None or self.reader.offset < SAVE_EVERY_BYTES:
            return
        if self.state is None or self.state.is_active:
            return
        self._may_summarise = False
        if self.run.is_proven():
            try:
                save_summary(self.store, self.run.events_path, self.reader.offset)
            except OSError:
                pass

    def _read_log_and_state(self) -> bool:
        changed = False
        if self.log.read_new():
            self.diagnosis = pick_diagnosis(diagnose_log(self.log.text()))
            changed = True
        return self._read_state() or changed

    def has_backlog(self) -> bool:
        """True while events.jsonl has more bytes than were read (a long run being opened)."""
        try:
            return self.run.events_path.stat().st_size - self._offset() > 1024
        except FileNotFoundError:
            return False

    def read_fraction(self) -> float:
        """How much of events.jsonl was read (1.0 when caught up or when there is none)."""
        try:
            size = self.run.events_path.stat().st_size
        except FileNotFoundError:
            return 1.0
        return min(1.0, self._offset() / size) if size else 1.0

    def _offset(self) -> int:
        return self.reader.offset if self.reader is not None else 0

    def _read_state(self) -> bool:
        try:
            state = refresh(self.run)
        except (OSError, ValueError) as err:  # no state.json (yet), or a half-written one
            self.state_error = f"state.json unreadable: {err}"
            return False
        changed = state != self.state
        self.state, self.state_error = state, None
        return changed
