"""Decoding the events file a block at a time (msgspec over whole blocks, numpy columns for rank-0
`log` events): `decode_block`, and `ColumnReader`, which reads the growing file with backend.core.tail."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
import numpy as np

from backend.contract.events import SCHEMA_VERSION, Checkpoint, CudaMemory, Eval, Event, Log, decode_line, line_version
from backend.core.tail import Tail

CHUNK_BYTES = 4 << 20  # decoded at a time
BATCH_BYTES = 32 << 20  # read into one batch for the store, which then works on long arrays

# the fields of a rank-0 `log` event that the store keeps as columns (every event)...
LOG_COLUMNS = ("step", "loss", "learning_rate", "grad_norm", "loss_scale", "overflow_count", "skipped_steps")


@dataclass
class EventBatch:
    """Decoded events: rank-0 `log` events as columns, every other rank-0 event whole (in file order)."""

    logs: dict[str, np.ndarray] = field(default_factory=dict)
    last_log: Log | None = None
    others: list[Event] = field(default_factory=list)
    other_ranks: set[int] = field(default_factory=set)
    bad_lines: int = 0
    newer_version: int | None = None  # lines of a newer events format (skipped, and said)

    @property
    def log_count(self) -> int:
        return len(self.logs["step"]) if self.logs else 0

    def note_newer(self, version: int | None) -> None:
        if version is not None:
            self.newer_version = max(version, self.newer_version or 0)

    @classmethod
    def joined(cls, batches: list[EventBatch]) -> EventBatch:
        """One batch of several read in file order (the store then works on long arrays, once)."""
        if len(batches) == 1:
            return batches[0]
        batch = cls(bad_lines=sum(b.bad_lines for b in batches))
        for part in batches:
            batch.note_newer(part.newer_version)
        with_logs = [b.logs for b in batches if b.logs]
        if with_logs:
            batch.logs = {name: np.concatenate([logs[name] for logs in with_logs]) for name in LOG_COLUMNS}
        batch.last_log = next((b.last_log for b in reversed(batches) if b.last_log is not None), None)
        batch.others = [event for b in batches for event in b.others]
        batch.other_ranks = set().union(*(b.other_ranks for b in batches))
        return batch

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> EventBatch:
        batch, rows = cls(), []
        for event in events:
            if event.rank != 0:
                batch.other_ranks.add(event.rank)
            elif isinstance(event, Log):
                rows.append(tuple(getattr(event, name) for name in LOG_COLUMNS))
                batch.last_log = event
            else:
                batch.others.append(event)
        batch.logs = _columns(rows)
        return batch


def _columns(rows: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    if not rows:
        return {}
    table = np.array(rows, dtype=float)  # None becomes NaN
    return {name: table[:, i] for i, name in enumerate(LOG_COLUMNS)}


class _Line(msgspec.Struct, gc=False):
    """The columns the store needs of every line (a projection of backend.contract.events' `Log`, for speed:
    other fields are skipped while decoding, and the newest log line is decoded again whole by the
    schema). The types are the schema's, so a line that does not fit it does not fit here either."""

    type: str = ""
    v: int = SCHEMA_VERSION
    rank: int = 0
    # a number the line does not have is NaN, so that a table of them is built without a
    # Python check per value; an explicit null (a NaN/inf the writer could not write) is None
    step: int | None = math.nan  # type: ignore[assignment]
    loss: float | None = math.nan
    learning_rate: float | None = math.nan
    grad_norm: float | None = math.nan
    loss_scale: float | None = math.nan
    overflow_count: int | None = math.nan  # type: ignore[assignment]
    skipped_steps: int | None = math.nan  # type: ignore[assignment]
    nonfinite: list[str] = []
    cuda: list[CudaMemory] | None = None
    time: float = 0.0
    metrics: dict[str, float | None] | None = None  # eval
    path: str | None = None  # checkpoint


_LINE_DECODER = msgspec.json.Decoder(_Line)
_NUMBERS = operator.attrgetter("rank", *LOG_COLUMNS)  # one C call per line makes the row tuple
_TYPE = operator.attrgetter("type")
_VERSION = operator.attrgetter("v")


def decode_block(data: bytes | bytearray, end: int | None = None) -> EventBatch:
    """Decode the complete lines in data[:end]; a bad line is counted and skipped, the others kept.

    Every line becomes a small typed record in C (msgspec); the numbers of all lines become one
    float table without a Python loop, and only the rare non-log lines are looked at one by one
    (decoded by the events schema).
    """
    end = len(data) if end is None else end
    try:
        lines = _LINE_DECODER.decode_lines(memoryview(data)[:end])
        raw: list[bytes] | None = None
        batch = EventBatch()
    except (msgspec.DecodeError, msgspec.ValidationError):  # a torn or foreign line: find it, keep the rest
        lines, raw, batch = _decode_each(bytes(data[:end]))
    if not lines:
        return batch
    if any(v != SCHEMA_VERSION for v in map(_VERSION, lines)):  # rare: a newer format's lines are said, skipped
        lines, raw = _drop_other_versions(lines, raw or _nonblank_lines(data, end, len(lines)), batch)
        if not lines:
            return batch
    table = _number_table(lines)
    ranks = table[:, 0]
    rank0 = ranks == 0
    is_log = np.fromiter(map(operator.eq, map(_TYPE, lines), itertools.repeat("log")), bool, len(lines))
    logs = is_log & rank0
    batch.logs = _columns_of(table[logs, 1:]) if logs.any() else {}
    if not rank0.all():
        batch.other_ranks = {int(rank) for rank in np.unique(ranks[~rank0])}
    raw_line = _raw_lines(data, end, len(lines), raw)
    for position in np.flatnonzero(rank0 & ~is_log).tolist():
        line = lines[position]
        if line.type in _FROM_LINE:  # frequent and small: what the store uses was decoded already
            batch.others.append(_FROM_LINE[line.type](line))
            continue
        event = decode_line(raw_line(position))  # run_begin / run_end (rare): whole, by the schema
        if event is None:
            batch.bad_lines += 1  # JSON, but not an event (no type, a type we do not know, a wrong field)
        else:
            batch.others.append(event)
    if batch.logs:
        last = decode_line(raw_line(int(np.flatnonzero(logs)[-1])))
        batch.last_log = last if isinstance(last, Log) else None
    return batch


_FROM_LINE: dict[str, Callable[[_Line], Event]] = {
    "eval": lambda line: Eval(step=_step(line.step), metrics=line.metrics or {}, time=line.time),
    "checkpoint": lambda line: Checkpoint(step=_step(line.step), path=line.path or "", time=line.time),
}


def _step(value: float | None) -> int | None:
    """A decoded step as the schema has it: None when the line had none (NaN here) or null."""
    return None if value is None or value != value else int(value)


def _drop_other_versions(lines: list[_Line], raw: list[bytes], batch: EventBatch) -> tuple[list[_Line], list[bytes]]:
    kept, kept_raw = [], []
    for line, text in zip(lines, raw, strict=True):
        if line.v == SCHEMA_VERSION:
            kept.append(line)
            kept_raw.append(text)
        elif line.v > SCHEMA_VERSION:
            batch.note_newer(line.v)
        else:
            batch.bad_lines += 1
    return kept, kept_raw


def _number_table(lines: list[Any]) -> np.ndarray:
    """rank + LOG_COLUMNS of every line as floats (None -> NaN), one row per line."""
    width = 1 + len(LOG_COLUMNS)
    try:  # no tuple per line kept, no None: floats straight into the array
        flat = np.fromiter(itertools.chain.from_iterable(map(_NUMBERS, lines)), float, len(lines) * width)
        return flat.reshape(len(lines), width)
    except TypeError:  # a null (a NaN/inf the writer could not write, rare): None becomes NaN
        return np.array(list(map(_NUMBERS, lines)), dtype=float).reshape(len(lines), width)


def _columns_of(table: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(LOG_COLUMNS)}


def _decode_each(block: bytes) -> tuple[list[Any], list[bytes], EventBatch]:
    """Line by line: the decodable lines (and their text), and a batch that counts the others."""
    lines, raw, batch = [], [], EventBatch()
    for text in block.split(b"\n"):
        if not text.strip():
            continue
        try:
            lines.append(_LINE_DECODER.decode(text))
        except (msgspec.DecodeError, msgspec.ValidationError):  # not JSON, not UTF-8, not an event object
            version = line_version(text)
            if version is not None and version > SCHEMA_VERSION:
                batch.note_newer(version)
            else:
                batch.bad_lines += 1
            continue
        raw.append(text)
    return lines, raw, batch


def _raw_lines(data: bytes | bytearray, end: int, count: int, raw: list[bytes] | None):
    """The text of decoded line i, found only when asked (the newest log line, a rare event)."""
    if raw is not None:
        return raw.__getitem__
    split: list[bytes] = []

    def line(position: int) -> bytes:
        back = count - 1 - position
        if back < 64:  # near the end (the newest log line): walk back from the end
            return _line_from_end(data, end, back)
        if not split:
            split.extend(_nonblank_lines(data, end, count))
        return split[position]

    return line


def _nonblank_lines(data: bytes | bytearray, end: int, expected: int) -> list[bytes]:
    """The lines of data[:end] as decode_lines counted them (it skips blank ones)."""
    raw = bytes(data[:end]).split(b"\n")
    if not raw[-1]:
        raw.pop()  # what follows the last newline: nothing
    if len(raw) == expected:  # the usual case: no blank line to drop
        return raw
    return [text for text in raw if text.strip()]


def _line_from_end(data: bytes | bytearray, end: int, back: int) -> bytes:
    """The non-blank line `back` lines before the last one of data[:end] (0 = the last)."""
    while True:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = bytes(data[start:end])
        if line.strip():
            if back == 0:
                return line.rstrip(b"\n")
            back -= 1
        end = start


class ColumnReader:
    """Incremental reader of events.jsonl, like backend.contract.events.EventReader, that returns columns.

    It reads with backend.core.tail (whole lines from `offset`, a half-written last line read again next
    time, a line over the bound skipped and counted), CHUNK_BYTES at a time into the tail's one
    reused buffer (bounded memory, no fresh pages per read).
    """

    def __init__(self, path: str | Path, offset: int = 0):
        self.path = Path(path)
        self.tail = Tail(self.path, offset)
        self.bad_lines = 0
        self.newer_version: int | None = None

    @property
    def offset(self) -> int:
        return self.tail.offset

    def read_batch(self, max_bytes: int = BATCH_BYTES) -> EventBatch:
        """The next complete events, from at most about `max_bytes` of the file, as one batch."""
        parts, read = [], 0
        while read < max_bytes:
            before, long_lines = self.tail.offset, self.tail.long_lines
            block = self.tail.read_into(min(CHUNK_BYTES, max_bytes))
            if self.tail.offset == before:  # a read that took nothing ends the read
                break
            read += self.tail.offset - before
            batch = decode_block(cast(bytearray, block.obj), len(block)) if len(block) else EventBatch()  # the tail's own buffer
            batch.bad_lines += self.tail.long_lines - long_lines
            parts.append(batch)
        batch = EventBatch.joined(parts) if parts else EventBatch()
        self.bad_lines += batch.bad_lines
        if batch.newer_version is not None:
            self.newer_version = max(batch.newer_version, self.newer_version or 0)
        return batch
