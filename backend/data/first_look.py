"""A fast first look at a training dataset, for the first paint: facts of the file, read as a stream in
constant memory: the number of records, the lines that are not valid JSON (with line numbers and the
error), the top-level keys seen (rows per key set), each record's raw length in characters and the first
records' JSON.

It knows nothing of swift's dataset formats: which rows swift keeps or drops, the messages it makes of
them, token lengths and truncation come only from swift itself (backend/data/swift_view.py), whose
report follows this first look. Nothing a row holds ever raises out of a scan.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend.data.files import file_problem
from backend.data.records import RowError, RowTooBig, iter_records
from backend.models.refs import DatasetRef, dataset_ref

# ---------------------------------------------------------------- references
# One resolver for dataset references: backend.models.refs (`parse_ref` is its name here).

parse_ref = dataset_ref

TABLE_SUFFIXES = (".csv",)


def looks_like_dataset(path: Path) -> bool:
    """A cheap look at the start of a file: a .csv table, a .json array or a .jsonl file whose
    first record is a JSON object (not, say, a config or a log). Plain .txt files are not offered (any
    text file would be); a typed path still works. Which format swift makes of it is swift's to say."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl", *TABLE_SUFFIXES):
        return False
    if file_problem(path):  # a FIFO named x.jsonl: open() would never return
        return False
    if suffix in TABLE_SUFFIXES:
        return path.is_file()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(8192).lstrip()
    except OSError:
        return False
    if suffix == ".json":
        return head.startswith("[")
    try:
        first = json.loads(head.partition("\n")[0])
    except json.JSONDecodeError:
        return True  # a broken jsonl is still worth inspecting
    return isinstance(first, dict)


# ---------------------------------------------------------------- the scan

PREVIEW_CHARS = 2000  # a preview record's JSON is cut here (the screen cuts it shorter)
MAX_KEY_SETS = 20  # more distinct key sets are counted together
KEY_SET_CHARS = 200
OTHER_KEY_SETS = "(other key sets)"


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
class BadLine:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class DatasetScan:
    """What one dataset file (or folder) holds, at a first look: facts of the file, no format rules."""

    path: Path
    records: int = 0  # every record of the file, valid JSON or not
    bad_count: int = 0  # records that are not valid JSON
    bad: list[BadLine] = field(default_factory=list)  # the first `max_bad`
    key_sets: Counter[str] = field(default_factory=Counter)  # "query+response" -> rows with those top-level keys
    preview: list[str] = field(default_factory=list)  # the first records' JSON, cut to PREVIEW_CHARS
    chars: LengthStats | None = None  # each valid record's length in characters (as JSON)
    complete: bool = True  # False when stopped early
    char_lengths: list[int] = field(default_factory=list, repr=False)
    unreadable: str | None = None  # why the file cannot be read at all (a line too long, nesting too deep)


def key_set(record: Any) -> str:
    """The top-level keys of a record, sorted and joined by "+"; what a record is when not an object."""
    if not isinstance(record, dict):
        return f"(not an object: {type(record).__name__})"
    if not record:
        return "(empty object)"
    label = "+".join(sorted(str(k) or '""' for k in record))
    return label if len(label) <= KEY_SET_CHARS else label[: KEY_SET_CHARS - 1] + "…"


def scan_dataset(
    path: Path,
    *,
    preview_rows: int = 3,
    max_bad: int = 50,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DatasetScan:
    """Stream through `path` once: records, lines that are not JSON, key sets, lengths and a preview.

    Nothing a row holds ever raises out of here: every record ends up counted or explained."""
    scan = DatasetScan(path=path)
    try:
        for line, record in iter_records(path, stop):
            _scan_record(scan, line, record, preview_rows, max_bad)
            if on_progress is not None and scan.records % 10_000 == 0:
                on_progress(scan.records)
    except (OSError, UnicodeError) as err:
        scan.unreadable = f"cannot be read: {err}"
    scan.complete = not (stop is not None and stop.is_set())
    scan.chars = LengthStats.of(scan.char_lengths)
    return scan


def _scan_record(scan: DatasetScan, line: int, record: Any, preview_rows: int, max_bad: int) -> None:
    scan.records += 1
    if isinstance(record, RowError):
        if isinstance(record, RowTooBig) and scan.unreadable is None:
            scan.unreadable = f"{record}: the file cannot be read"
        scan.bad_count += 1
        if len(scan.bad) < max_bad:
            scan.bad.append(BadLine(line, str(record)))
        return
    label = key_set(record)
    if label not in scan.key_sets and len(scan.key_sets) >= MAX_KEY_SETS:
        label = OTHER_KEY_SETS
    scan.key_sets[label] += 1
    text = json.dumps(record, ensure_ascii=False)
    scan.char_lengths.append(len(text))
    if len(scan.preview) < preview_rows:
        scan.preview.append(text[:PREVIEW_CHARS])


# ---------------------------------------------------------------- one reference, everything


@dataclass
class DatasetReport:
    """The first look at one `data.train` / `data.val` entry; swift's own report follows
    (backend/data/swift_view.py)."""

    ref: DatasetRef
    scan: DatasetScan | None = None

    @property
    def problem(self) -> str | None:
        return self.ref.problem


def inspect_ref(ref: str, *, base_dir: Path | None = None, stop: threading.Event | None = None) -> DatasetReport:
    """A first look at a dataset reference (records, lines that are not JSON, key sets, a raw preview);
    never raises for what a file holds."""
    parsed = parse_ref(ref, base_dir)
    not_regular = file_problem(parsed.path) if parsed.path is not None else None
    if not_regular:  # a FIFO or a symlink loop is not "missing": say what it is
        parsed = replace(parsed, problem=not_regular)
    report = DatasetReport(parsed)
    if parsed.path is None or parsed.problem:
        return report
    report.scan = scan_dataset(parsed.path, stop=stop)
    return report
