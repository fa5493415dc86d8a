"""A fast first look at a training dataset, for the first paint: rows, the rows swift will drop and
why (with line numbers), character lengths and a preview, read as a stream in constant memory.

It follows ms-swift's AutoPreprocessor rules and never contradicts swift: a test checks it against
swift's own loader on every documented format (tests/data_inspect/test_preview_agrees.py). Token
lengths, truncation and trained tokens come only from swift itself (backend/oracle/swift_data.py),
whose answer replaces this guess when it arrives. Nothing a row holds ever raises out of a scan.
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend.data_files import file_problem
from backend.data_formats import MESSAGE_KEYS, QUERY_KEYS, RESPONSE_KEYS, Layout, Message, detect_layout, to_messages
from backend.data_records import RowError, RowTooBig, iter_records
from backend.refs import DatasetRef, dataset_ref

# ---------------------------------------------------------------- references
# One resolver for dataset references: backend.refs (`parse_ref` is its name here).

parse_ref = dataset_ref


def looks_like_dataset(path: Path) -> bool:
    """A quick look at the start of a file: does it hold chat rows (not, say, a config or a log)?
    Plain .txt files are not offered (any text file would be); a typed path still works."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return False
    if file_problem(path):  # a FIFO named x.jsonl: open() would never return
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(8192)
    except OSError:
        return False
    known = {*MESSAGE_KEYS, *QUERY_KEYS, *RESPONSE_KEYS}
    if suffix == ".csv":
        header = {name.strip().lower() for name in head.partition("\n")[0].split(",")}
        return bool(header & known)
    stripped = head.lstrip()
    if suffix == ".json" and stripped.startswith("["):
        return True
    try:
        first = json.loads(stripped.partition("\n")[0])
    except json.JSONDecodeError:
        return suffix == ".jsonl"  # a broken jsonl is still worth inspecting
    return isinstance(first, dict) and bool({str(k).lower() for k in first} & known)


# ---------------------------------------------------------------- the scan


@dataclass(frozen=True)
class LengthStats:
    count: int
    minimum: int
    median: float
    p95: int
    maximum: int
    mean: float

    @classmethod
    def of(cls, values: list[int]) -> LengthStats | None:
        if not values:
            return None
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return cls(len(ordered), ordered[0], statistics.median(ordered), p95, ordered[-1],
                   sum(ordered) / len(ordered))

    def describe(self, unit: str) -> str:
        return (f"{unit}: min {self.minimum:,}, median {self.median:,.0f}, p95 {self.p95:,}, "
                f"max {self.maximum:,}, mean {self.mean:,.0f}")


@dataclass(frozen=True)
class Malformed:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class DatasetScan:
    """What one dataset file (or folder) holds, at a first look."""

    path: Path
    rows: int = 0  # rows swift keeps (as far as this first look can tell)
    malformed_count: int = 0
    malformed: list[Malformed] = field(default_factory=list)  # the first `max_malformed`
    preview: list[list[Message]] = field(default_factory=list)
    chars: LengthStats | None = None
    complete: bool = True  # False when stopped early
    char_lengths: list[int] = field(default_factory=list, repr=False)
    layout: str = ""  # swift's preprocessor for the file: messages, alpaca or response
    unreadable: str | None = None  # why swift's loader refuses the whole file (a line that is not JSON)

    @property
    def total_rows(self) -> int:
        return self.rows + self.malformed_count


LAYOUT_ROWS = 100  # swift picks the preprocessor from the file's columns; the first rows show them


def scan_dataset(
    path: Path,
    *,
    preview_rows: int = 3,
    max_malformed: int = 50,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DatasetScan:
    """Stream through `path` once: counts, rows swift drops, a preview and character lengths.

    Nothing a row holds ever raises out of here: every row ends up counted or explained."""
    scan = DatasetScan(path=path)
    records = iter_records(path, stop)
    head: list[tuple[int, Any]] = []
    keys: set[str] = set()
    try:
        for item in records:
            head.append(item)
            if isinstance(item[1], dict):
                keys |= {str(k) for k in item[1]}
            if len(head) >= LAYOUT_ROWS:
                break
        layout = detect_layout(keys)
        scan.layout = layout.kind
        for number, (line, record) in enumerate(itertools.chain(head, records), start=1):
            _scan_row(scan, line, record, layout, preview_rows, max_malformed)
            if on_progress is not None and number % 10_000 == 0:
                on_progress(number)
    except (OSError, UnicodeError) as err:
        scan.unreadable = f"cannot be read: {err}"
    scan.complete = not (stop is not None and stop.is_set())
    scan.chars = LengthStats.of(scan.char_lengths)
    return scan


def _scan_row(scan: DatasetScan, line: int, record: Any, layout: Layout, preview_rows: int,
              max_malformed: int) -> None:
    try:
        messages = to_messages(record, layout)
    except RowError as err:
        if isinstance(record, RowTooBig) and scan.unreadable is None:
            scan.unreadable = f"{err}: swift's loader cannot read this file"
        elif isinstance(record, RowError) and scan.unreadable is None:
            scan.unreadable = f"line {line} is not valid JSON: swift's loader refuses the whole file"
        scan.malformed_count += 1
        if len(scan.malformed) < max_malformed:
            scan.malformed.append(Malformed(line, str(err)))
        return
    scan.rows += 1
    if len(scan.preview) < preview_rows:
        scan.preview.append(messages)
    scan.char_lengths.append(sum(len(m["content"]) for m in messages))


# ---------------------------------------------------------------- one reference, everything


@dataclass
class DatasetReport:
    """The first look at one `data.train` / `data.val` entry (swift's own report replaces the guess:
    backend/oracle/swift_data.py)."""

    ref: DatasetRef
    scan: DatasetScan | None = None

    @property
    def problem(self) -> str | None:
        return self.ref.problem

    @property
    def rows_used(self) -> int | None:
        """Rows swift trains on at a first guess: `#N` takes N rows (repeating rows when N is larger)."""
        if self.scan is None:
            return None
        if self.ref.sample is None or not self.scan.total_rows:
            return self.scan.rows
        return round(self.ref.sample * self.scan.rows / self.scan.total_rows)


def inspect_ref(ref: str, *, base_dir: Path | None = None, stop: threading.Event | None = None) -> DatasetReport:
    """A first look at a dataset reference (rows, rows swift drops, a preview); never raises for
    what a file holds."""
    parsed = parse_ref(ref, base_dir)
    not_regular = file_problem(parsed.path) if parsed.path is not None else None
    if not_regular:  # a FIFO or a symlink loop is not "missing": say what it is
        parsed = replace(parsed, problem=not_regular)
    report = DatasetReport(parsed)
    if parsed.path is None or parsed.problem:
        return report
    report.scan = scan_dataset(parsed.path, stop=stop)
    return report
