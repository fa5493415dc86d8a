"""What the monitor knows about one run, read from its folder only, incrementally.

`RunFeed.poll()` runs in a thread worker: it reads the new bytes of events.jsonl (into a
MetricsStore) and of output.log (into a bounded tail), and the run's state. The screen reads
the results on the UI thread; the store has its own lock, the log tail hands over new lines
through a thread-safe queue. No Textual here.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.core.tail import Tail, mark
from backend.rundir.diagnose import EXCEPTION_LINE, Diagnosis, diagnose_log
from backend.rundir.layout import RunFolder, RunState
from backend.rundir.startup import Startup, read_startup
from backend.runs.status import refresh
from backend.series import BATCH_BYTES, ColumnReader, MetricsStore
from backend.series.summary import SAVE_EVERY_BYTES, restore_or_read, save_summary

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
        self.tail: Tail | None = None  # None: not opened yet
        self.lines: deque[LogLine] = deque(maxlen=keep)
        self.pending: deque[LogLine] = deque(maxlen=keep)  # new since the UI last took them
        self._in_traceback = False
        self._lock = threading.Lock()

    def read_new(self, max_bytes: int = 1 << 20) -> int:
        """Read what was appended; returns how many complete lines arrived."""
        now = mark(self.path)
        if now is None:
            return 0
        if self.tail is None or now.size < self.tail.offset:  # first look, or the file was truncated
            self.tail = Tail.from_end(self.path, self.start_bytes)
        new = [self._line(raw.decode("utf-8", errors="replace")) for raw in self.tail.read_lines(max_bytes)]
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
        self._torn_at: int | None = None  # the offset of a torn last line counted as damaged
        self.log = LogFollower(self.run.log_path)
        self.state: RunState | None = None
        self.state_error: str | None = None
        self.diagnosis: Diagnosis | None = None
        self.startup: Startup | None = None  # what a run that logged no step yet is doing (#35)

    def poll(self, report: Callable[[float], object] | None = None, cancelled: Callable[[], bool] | None = None,
             report_every: float = 0.5) -> bool:
        """Read events to the end of the file (a long backlog whole, `report(fraction read)` every
        `report_every` s meanwhile), then the new log lines and the state once. True if anything changed.
        Ends: every turn either consumes bytes or is the last (backend.core.tail never spins)."""
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
        return self._count_torn_tail() or changed

    def _count_torn_tail(self) -> bool:
        """An ended run whose events.jsonl ends with a line that never got its newline (a full disk, a
        crashed node): that line is a damaged one, said once (and taken back if it is completed later)."""
        if self.reader is None:
            return False
        torn = self.state is not None and not self.state.is_active and self.reader.tail.unread_bytes() > 0
        at = self.reader.offset if torn else None
        if at == self._torn_at:
            return False
        with self.store.lock:
            self.store.bad_lines += (at is not None) - (self._torn_at is not None)
            self.store.version += 1
        self._torn_at = at
        return True

    def read_events(self, max_bytes: int = BATCH_BYTES) -> bool:
        """At most `max_bytes` of new events into the store; True if it held any (or damaged lines).
        The first read restores the run's events summary (backend.series.summary) when it is valid."""
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
        changed = self._read_state() or changed
        return self._read_startup() or changed

    def _read_startup(self) -> bool:
        """The starting run's phase, read while it has logged no step (then None: its numbers say the rest)."""
        state, startup = self.state, None
        if state is not None and state.is_active and self.store.last_log is None:
            startup = read_startup(self.run, state.started_at or state.created_at)
        changed = startup != self.startup
        self.startup = startup
        return changed

    def has_backlog(self) -> bool:
        """True while a read of events.jsonl could take more (a long run being opened); False at a torn
        last line that the last read could not take."""
        return self.reader is not None and self.reader.tail.has_more()

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
