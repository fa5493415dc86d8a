"""The metrics of a run for display: fed by the events file's increments, bounded in memory.

A run of 100,000 steps logs 100,000 points per metric; a terminal plot is about 150 cells
wide. Each `Series` keeps, whatever the run's length:

- a fixed number of buckets over the whole run (a power of two steps each), every bucket
  with its lowest, highest and last point, so a spike or a dip is never averaged away;
- the newest raw points (a ring), so zooming to the last N steps shows every point.

The full data stays on disk in events.jsonl. The store takes the typed events of
backend.events.EventReader (`ingest`), or, much faster for long files, the column batches
of `ColumnReader`, which reads with backend.tail and decodes whole blocks at once (msgspec)
instead of building one event per line.
No Textual here: the store is plain Python + numpy and is tested on its own.
"""

from __future__ import annotations

import itertools
import math
import operator
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
import numpy as np

from backend.events import (
    SCHEMA_VERSION,
    Checkpoint,
    CudaMemory,
    Eval,
    Event,
    Log,
    MemoryPhase,
    RunBegin,
    RunEnd,
    damaged_text,
    decode_line,
    line_version,
    newer_format_text,
    to_plain,
)
from backend.tail import Tail

BUCKETS = 1024
TAIL_POINTS = 4096
CHUNK_BYTES = 4 << 20  # decoded at a time
BATCH_BYTES = 32 << 20  # read into one batch for the store, which then works on long arrays
SMOOTHING = 0.9

# the fields of a rank-0 `log` event that the store keeps as columns (every event)...
LOG_COLUMNS = ("step", "loss", "learning_rate", "grad_norm", "loss_scale", "overflow_count", "skipped_steps")
# the columns that become plotted series
SERIES_NAMES = ("loss", "learning_rate", "grad_norm", "loss_scale")

Points = tuple[list[float], list[float]]


# ---------------------------------------------------------------- one series


def _group_extremes(groups: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> dict[str, np.ndarray]:
    """Per group (ids in `groups`): the min point, the max point, the last point, the count.

    "Last" is the last one in arrival order (a stable sort keeps it); steps arrive sorted,
    so the sort is usually skipped.
    """
    if len(groups) > 1 and np.any(groups[1:] < groups[:-1]):
        order = np.argsort(groups, kind="stable")
        groups, xs, ys = groups[order], xs[order], ys[order]
    starts = np.flatnonzero(np.diff(groups, prepend=groups[0] - 1))
    counts = np.diff(np.append(starts, len(groups)))
    ends = starts + counts - 1
    low = _first_where(ys == np.repeat(np.minimum.reduceat(ys, starts), counts), starts)
    high = _first_where(ys == np.repeat(np.maximum.reduceat(ys, starts), counts), starts)
    return {
        "id": groups[starts], "count": counts,
        "min_x": xs[low], "min_y": ys[low], "max_x": xs[high], "max_y": ys[high],
        "last_x": xs[ends], "last_y": ys[ends],
    }


def _first_where(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the first True in each group of `mask` (each group has one)."""
    positions = np.where(mask, np.arange(len(mask)), len(mask))
    return np.minimum.reduceat(positions, starts)


def thin(xs: np.ndarray, ys: np.ndarray, max_points: int) -> Points:
    """At most about `max_points` points that keep every bin's lowest and highest one."""
    if len(xs) <= max_points:
        return xs.tolist(), ys.tolist()
    bins = max(1, max_points // 2)
    span = float(xs.max() - xs.min()) or 1.0
    ids = np.minimum(((xs - xs.min()) / span * bins).astype(np.int64), bins - 1)
    ext = _group_extremes(ids, xs, ys)
    px = np.concatenate([ext["min_x"], ext["max_x"], xs[-1:]])
    py = np.concatenate([ext["min_y"], ext["max_y"], ys[-1:]])
    px, unique = np.unique(px, return_index=True)  # sorted by x, one point per x
    return px.tolist(), py[unique].tolist()


def ema(values: np.ndarray, weight: float, state: float = 0.0) -> tuple[np.ndarray, float]:
    """e[k] = weight * e[k-1] + (1 - weight) * values[k], from e[-1] = state; returns (e, last e).

    Vectorised a block at a time: inside a block e[k] = w^k (state + (1-w) sum_j w^-j v[j]);
    blocks stay short enough that w^-j stays under 1e100 (and long: each block is a few numpy calls).
    """
    if weight <= 0:
        return values.astype(float), float(values[-1])
    length = max(1, min(4096, int(100 / -math.log10(weight)))) if weight < 1 else 4096
    powers = weight ** np.arange(1, length + 1)
    out = np.empty(len(values))
    for start in range(0, len(values), length):
        block = values[start:start + length]
        k = len(block)
        out[start:start + k] = powers[:k] * (state + (1 - weight) * np.cumsum(block / powers[:k]))
        state = float(out[start + k - 1])
    return out, state


class Series:
    """One metric over steps in bounded memory: extremes per bucket for the whole run, raw newest points."""

    def __init__(self, buckets: int = BUCKETS, tail: int = TAIL_POINTS):
        if buckets < 2 or buckets % 2:
            raise ValueError("buckets must be an even number >= 2")
        self.buckets = buckets
        self.width = 1.0  # steps per bucket, doubled whenever the run outgrows the buckets
        self.origin: float | None = None
        self.count = 0
        self.last: tuple[float, float] | None = None
        self._n = np.zeros(buckets, dtype=np.int64)
        self._cols = {name: np.zeros(buckets) for name in ("min_x", "min_y", "max_x", "max_y", "last_x", "last_y")}
        self._tail_x: deque[float] = deque(maxlen=tail)
        self._tail_y: deque[float] = deque(maxlen=tail)
        self._tail_from_start = True  # nothing has fallen out of the ring yet

    def __len__(self) -> int:
        return self.count

    # ------------------------------------------------------------ adding

    def append(self, x: float, y: float) -> None:
        self.extend(np.array([x], dtype=float), np.array([y], dtype=float))

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Add points in arrival order; non-finite values are skipped (they are not plottable)."""
        xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        keep = np.isfinite(xs) & np.isfinite(ys)
        if not keep.all():
            xs, ys = xs[keep], ys[keep]
        if not len(xs):
            return
        if self.origin is None:
            self.origin = float(xs.min())
        while (xs.max() - self.origin) // self.width >= self.buckets:
            self._coarsen()
        slots = np.clip(((xs - self.origin) // self.width).astype(np.int64), 0, self.buckets - 1)
        self._merge(_group_extremes(slots, xs, ys))
        self._extend_tail(xs, ys)
        self.count += len(xs)
        self.last = (float(xs[-1]), float(ys[-1]))

    def _merge(self, ext: dict[str, np.ndarray]) -> None:
        ids, cols, fresh = ext["id"], self._cols, self._n[ext["id"]] == 0
        lower = fresh | (ext["min_y"] < cols["min_y"][ids])
        higher = fresh | (ext["max_y"] > cols["max_y"][ids])
        for end, better in (("min", lower), ("max", higher)):
            for axis in ("x", "y"):
                name = f"{end}_{axis}"
                cols[name][ids] = np.where(better, ext[name], cols[name][ids])
        cols["last_x"][ids] = ext["last_x"]
        cols["last_y"][ids] = ext["last_y"]
        self._n[ids] += ext["count"]

    def _coarsen(self) -> None:
        """Halve the resolution: bucket pairs (2i, 2i+1) become bucket i."""
        half = self.buckets // 2
        n = self._n.reshape(half, 2)
        cols = {name: col.reshape(half, 2) for name, col in self._cols.items()}
        # an empty bucket never wins; among two full ones the lower min / higher max does
        pick_min = np.where((n[:, 1] > 0) & ((n[:, 0] == 0) | (cols["min_y"][:, 1] < cols["min_y"][:, 0])), 1, 0)
        pick_max = np.where((n[:, 1] > 0) & ((n[:, 0] == 0) | (cols["max_y"][:, 1] > cols["max_y"][:, 0])), 1, 0)
        pick_last = np.where(n[:, 1] > 0, 1, 0)
        rows = np.arange(half)
        merged = {}
        for name, pick in (("min", pick_min), ("max", pick_max), ("last", pick_last)):
            for axis in ("x", "y"):
                merged[f"{name}_{axis}"] = cols[f"{name}_{axis}"][rows, pick]
        counts = n.sum(axis=1)
        for name, col in self._cols.items():
            col[:half] = merged[name]
            col[half:] = 0.0
        self._n[:half] = counts
        self._n[half:] = 0
        self.width *= 2

    def _extend_tail(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Append to the ring of newest points; a step that goes back (a resumed run) replaces what followed it."""
        breaks = np.flatnonzero(np.diff(xs) <= 0) + 1
        keep = self._tail_x.maxlen or len(xs)
        for seg_x, seg_y in zip(np.split(xs, breaks), np.split(ys, breaks), strict=True):
            while self._tail_x and self._tail_x[-1] >= seg_x[0]:
                self._tail_x.pop()
                self._tail_y.pop()
            if len(self._tail_x) + len(seg_x) > keep:
                self._tail_from_start = False
            seg_x, seg_y = seg_x[-keep:], seg_y[-keep:]  # the ring would drop the rest at once
            self._tail_x.extend(seg_x.tolist())
            self._tail_y.extend(seg_y.tolist())

    # ------------------------------------------------------------ saved and restored (events.summary.npz)

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Everything this series holds: its arrays, and its scalars as JSON-able values."""
        arrays = {"n": self._n, **self._cols, "tail_x": np.fromiter(self._tail_x, float),
                  "tail_y": np.fromiter(self._tail_y, float)}
        scalars = {"buckets": self.buckets, "tail": self._tail_x.maxlen, "width": self.width, "origin": self.origin,
                   "count": self.count, "last": self.last, "tail_from_start": self._tail_from_start}
        return arrays, scalars

    @classmethod
    def from_state(cls, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any]) -> Series:
        """The series `state()` described; ValueError when the parts do not fit together."""
        series = cls(int(scalars["buckets"]), int(scalars["tail"]))
        for name, target in (("n", series._n), *series._cols.items()):
            values = np.asarray(arrays[name])
            if values.shape != target.shape or values.dtype.kind != target.dtype.kind:
                raise ValueError(f"{name}: {values.dtype}{values.shape}, expected {target.dtype}{target.shape}")
            target[:] = values
        tail_x, tail_y = np.asarray(arrays["tail_x"], float), np.asarray(arrays["tail_y"], float)
        if tail_x.shape != tail_y.shape or tail_x.ndim != 1 or len(tail_x) > int(scalars["tail"]):
            raise ValueError(f"tail: {tail_x.shape} steps, {tail_y.shape} values")
        series._tail_x.extend(tail_x.tolist())
        series._tail_y.extend(tail_y.tolist())
        series.width, series.count = float(scalars["width"]), int(scalars["count"])
        series.origin = None if scalars["origin"] is None else float(scalars["origin"])
        series.last = None if scalars["last"] is None else (float(scalars["last"][0]), float(scalars["last"][1]))
        series._tail_from_start = bool(scalars["tail_from_start"])
        return series

    # ------------------------------------------------------------ reading

    @property
    def tail_is_complete(self) -> bool:
        """True while the ring holds the run from its first point (a resume's repeats replaced)."""
        return self._tail_from_start

    def minimum(self) -> tuple[float, float] | None:
        return self._extreme("min")

    def maximum(self) -> tuple[float, float] | None:
        return self._extreme("max")

    def _extreme(self, end: str) -> tuple[float, float] | None:
        used = np.flatnonzero(self._n)
        if not len(used):
            return None
        ys = self._cols[f"{end}_y"][used]
        best = used[np.argmin(ys) if end == "min" else np.argmax(ys)]
        return float(self._cols[f"{end}_x"][best]), float(self._cols[f"{end}_y"][best])

    def points(self, last_n: int | None = None, max_points: int = 400) -> Points:
        """Points to draw: the whole run, or the steps after last step - `last_n`; extremes always kept."""
        if self.last is None:
            return [], []
        cutoff = self.last[0] - last_n if last_n else -math.inf
        tail_x = self._tail_x
        if self.tail_is_complete or (tail_x and tail_x[0] <= cutoff):
            xs, ys = np.fromiter(tail_x, dtype=float), np.fromiter(self._tail_y, dtype=float)
        else:
            xs, ys = self._bucket_points()
        keep = xs > cutoff
        return thin(xs[keep], ys[keep], max_points)

    def _bucket_points(self) -> tuple[np.ndarray, np.ndarray]:
        used = np.flatnonzero(self._n)
        c = self._cols
        xs = np.concatenate([c["min_x"][used], c["max_x"][used], c["last_x"][used[-1:]]])
        ys = np.concatenate([c["min_y"][used], c["max_y"][used], c["last_y"][used[-1:]]])
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        distinct = np.append(np.diff(xs) != 0, True)  # one point per x: the later one
        return xs[distinct], ys[distinct]


# ---------------------------------------------------------------- decoding blocks of events


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
    """The columns the store needs of every line (a projection of backend.events' `Log`, for speed:
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
    """Incremental reader of events.jsonl, like backend.events.EventReader, that returns columns.

    It reads with backend.tail (whole lines from `offset`, a half-written last line read again next
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


# ---------------------------------------------------------------- the store


@dataclass(frozen=True)
class Throughput:
    step: int | None
    max_steps: int | None
    steps_per_second: float | None  # averaged over the recent log events
    tokens_per_second: float | None
    eta_seconds: float | None
    fraction: float | None


@dataclass(frozen=True)
class OverflowMarker:
    step: float
    scale: float | None
    count: int  # overflows since the previous log event


class MetricsStore:
    """Everything the monitor shows about one run's events, in bounded memory.

    Feed it with `ingest(events)` (typed events from EventReader) or `ingest_batch(batch)` (from
    ColumnReader). Readers in other threads take `lock` around reads.
    """

    def __init__(self, buckets: int = BUCKETS, tail: int = TAIL_POINTS, smoothing: float = SMOOTHING):
        self.lock = threading.RLock()
        self.smoothing = smoothing
        self.series = {name: Series(buckets, tail) for name in SERIES_NAMES}
        self.loss_smooth = Series(buckets, tail)
        self.eval_loss = Series(buckets, tail)
        self.overflows = Series(buckets, tail)  # x: step, y: the scale after the drop
        self.markers: deque[OverflowMarker] = deque(maxlen=256)
        self.run_begin: RunBegin | None = None
        self.run_end: RunEnd | None = None
        self.last_log: Log | None = None
        self.last_eval: Eval | None = None
        self.checkpoints: deque[tuple[int, str]] = deque(maxlen=32)
        self.memory_phases: deque[MemoryPhase] = deque(maxlen=512)  # rank 0's, as written (the panel folds them)
        self.attempts = 0
        self.log_events = 0
        self.bad_lines = 0  # lines of the file that were not events (torn, not JSON): skipped, and said
        self.newer_version: int | None = None  # lines of a newer events format: skipped, and said
        self.other_ranks: set[int] = set()
        self.overflow_total = 0
        self.skipped_total = 0
        self.grad_norm_lost_at: float | None = None  # first step whose grad norm was not finite
        self.version = 0  # bumped by every ingest that changed something
        self.summary_problem: str | None = None  # a damaged events summary, not used (backend.series_summary)
        self._ema = 0.0
        self._ema_n = 0
        self._last_counts = {"overflow_count": 0.0, "skipped_steps": 0.0}
        self._grad_seen = False
        self._recent: deque[tuple[float, float]] = deque(maxlen=32)  # (time, step) of recent logs

    # ------------------------------------------------------------ feeding

    def ingest(self, events: Iterable[Event]) -> int:
        return self.ingest_batch(EventBatch.from_events(events))

    def ingest_batch(self, batch: EventBatch) -> int:
        """Add a batch; returns how many lines it held (events, and damaged lines, which are only counted)."""
        with self.lock:
            self.other_ranks |= batch.other_ranks
            self.bad_lines += batch.bad_lines
            if batch.newer_version is not None:
                self.newer_version = max(batch.newer_version, self.newer_version or 0)
            evals: list[tuple[float, float]] = []
            for event in batch.others:
                self._other_event(event, evals)
            if evals:
                self.eval_loss.extend(*np.array(evals, dtype=float).T)
            if batch.log_count:
                self._logs(batch.logs)
            if batch.last_log is not None:
                self.last_log = batch.last_log
                self._note_progress(batch.last_log)
            changed = batch.log_count + len(batch.others) + batch.bad_lines + (batch.newer_version is not None)
            if changed:
                self.version += 1
            return changed

    def _other_event(self, event: Event, evals: list[tuple[float, float]]) -> None:
        if isinstance(event, RunBegin):
            self.run_begin, self.run_end = event, None
            self.attempts += 1
        elif isinstance(event, RunEnd):
            self.run_end = event
        elif isinstance(event, Eval):
            self.last_eval = event
            value = event.metrics.get("eval_loss")
            if value is not None and event.step is not None:
                evals.append((float(event.step), float(value)))
        elif isinstance(event, Checkpoint):
            self.checkpoints.append((event.step or 0, event.path))
        elif isinstance(event, MemoryPhase):
            self.memory_phases.append(event)

    def _logs(self, cols: dict[str, np.ndarray]) -> None:
        steps = cols["step"]
        for name in SERIES_NAMES:
            self.series[name].extend(steps, cols[name])
        self._smooth(steps, cols["loss"])
        overflowed = self._count_overflows(steps, cols)
        self._watch_grad_norm(steps, cols["grad_norm"], cols["loss"], overflowed)
        self.log_events += len(steps)

    def _note_progress(self, last: Log) -> None:
        """Remember (time, step) of the newest log of each batch, for an averaged rate."""
        when, step = last.time, last.step
        if step is None:
            return
        if self._recent and step < self._recent[-1][1]:
            self._recent.clear()  # a resumed run went back to its checkpoint
        self._recent.append((float(when), float(step)))

    def _smooth(self, steps: np.ndarray, losses: np.ndarray) -> None:
        """Debiased exponential moving average of the loss (TensorBoard's smoothing)."""
        keep = np.isfinite(losses) & np.isfinite(steps)
        values = losses[keep]
        if not len(values):
            return
        raw, self._ema = ema(values, self.smoothing, self._ema)
        counts = self._ema_n + np.arange(1, len(values) + 1)
        self._ema_n += len(values)
        self.loss_smooth.extend(steps[keep], raw / (1 - self.smoothing**counts) if self.smoothing > 0 else raw)

    def _count_overflows(self, steps: np.ndarray, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Markers where the cumulative overflow count rose; a count that restarts (resume) adds on.

        Returns which rows had an overflow (their grad norm is inf by design)."""
        overflowed = np.zeros(len(steps), dtype=bool)
        for name in ("overflow_count", "skipped_steps"):
            values = cols[name]
            valid = np.isfinite(values)
            if not valid.any():
                continue
            seq = np.concatenate([[self._last_counts[name]], values[valid]])
            rises = np.diff(seq)
            rises = np.where(rises < 0, seq[1:], rises)  # the count restarted from zero
            self._last_counts[name] = float(seq[-1])
            if name == "skipped_steps":
                self.skipped_total += int(rises.sum())
                continue
            self.overflow_total += int(rises.sum())
            at = np.flatnonzero(rises > 0)
            overflowed[np.flatnonzero(valid)[at]] = True
            marker_steps, scales = steps[valid][at], cols["loss_scale"][valid][at]
            for step, scale, count in zip(marker_steps.tolist(), scales.tolist(), rises[at].tolist(), strict=True):
                self.markers.append(OverflowMarker(step, scale if math.isfinite(scale) else None, int(count)))
            self.overflows.extend(marker_steps, scales)
        return overflowed

    def _watch_grad_norm(self, steps: np.ndarray, grads: np.ndarray, losses: np.ndarray,
                         overflowed: np.ndarray) -> None:
        """A grad norm that was finite and then is missing (NaN/inf) at a step the scaler did not skip."""
        finite = np.isfinite(grads) | overflowed
        if not self._grad_seen:
            measured = np.isfinite(grads)
            if not measured.any():
                return
            self._grad_seen = True
            first = int(np.argmax(measured))
            steps, grads, losses, finite = steps[first:], grads[first:], losses[first:], finite[first:]
        lost = ~finite & np.isfinite(losses)
        if self.grad_norm_lost_at is None and lost.any():
            self.grad_norm_lost_at = float(steps[int(np.argmax(lost))])

    # ------------------------------------------------------------ saved and restored (events.summary.npz)

    def all_series(self) -> dict[str, Series]:
        return {**self.series, "loss_smooth": self.loss_smooth, "eval_loss": self.eval_loss,
                "overflows": self.overflows}

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Everything this store holds: arrays named "<series>.<part>", and the rest as JSON-able values."""
        with self.lock:
            arrays: dict[str, np.ndarray] = {}
            series_scalars = {}
            for key, series in self.all_series().items():
                parts, series_scalars[key] = series.state()
                arrays.update({f"{key}.{part}": values for part, values in parts.items()})
            scalars = {
                "smoothing": self.smoothing, "series": series_scalars,
                "markers": [[m.step, m.scale, m.count] for m in self.markers], "markers_kept": self.markers.maxlen,
                "run_begin": _plain(self.run_begin), "run_end": _plain(self.run_end),
                "last_log": _plain(self.last_log), "last_eval": _plain(self.last_eval),
                "newer_version": self.newer_version, "checkpoints": list(self.checkpoints), "attempts": self.attempts,
                "log_events": self.log_events, "bad_lines": self.bad_lines, "other_ranks": sorted(self.other_ranks),
                "overflow_total": self.overflow_total, "skipped_total": self.skipped_total,
                "grad_norm_lost_at": self.grad_norm_lost_at, "ema": self._ema, "ema_n": self._ema_n,
                "last_counts": self._last_counts, "grad_seen": self._grad_seen, "recent": list(self._recent),
            }
            return arrays, scalars

    def restore_state(self, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any]) -> None:
        """Become the store `state()` described (in place: panels keep their reference); raises
        ValueError/KeyError/TypeError, and changes nothing, when the parts do not fit together."""
        restored = {key: Series.from_state({part.split(".", 1)[1]: arrays[part] for part in arrays
                                            if part.split(".", 1)[0] == key}, series_scalars)
                    for key, series_scalars in scalars["series"].items()}
        if set(restored) != set(self.all_series()):
            raise ValueError(f"series {sorted(restored)}, expected {sorted(self.all_series())}")
        lost = scalars["grad_norm_lost_at"]
        values = {  # every value converted first: a part that does not fit raises before anything changed
            "smoothing": float(scalars["smoothing"]),
            "series": {name: restored[name] for name in SERIES_NAMES}, "loss_smooth": restored["loss_smooth"],
            "eval_loss": restored["eval_loss"], "overflows": restored["overflows"],
            "markers": deque((OverflowMarker(float(step), None if scale is None else float(scale), int(count))
                              for step, scale, count in scalars["markers"]), maxlen=int(scalars["markers_kept"])),
            "run_begin": _typed(scalars["run_begin"], RunBegin), "run_end": _typed(scalars["run_end"], RunEnd),
            "last_log": _typed(scalars["last_log"], Log), "last_eval": _typed(scalars["last_eval"], Eval),
            "newer_version": None if scalars["newer_version"] is None else int(scalars["newer_version"]),
            "checkpoints": deque(((int(step), str(path)) for step, path in scalars["checkpoints"]),
                                 maxlen=self.checkpoints.maxlen),
            "attempts": int(scalars["attempts"]), "log_events": int(scalars["log_events"]),
            "bad_lines": int(scalars["bad_lines"]), "other_ranks": {int(rank) for rank in scalars["other_ranks"]},
            "overflow_total": int(scalars["overflow_total"]), "skipped_total": int(scalars["skipped_total"]),
            "grad_norm_lost_at": None if lost is None else float(lost),
            "_ema": float(scalars["ema"]), "_ema_n": int(scalars["ema_n"]),
            "_last_counts": {name: float(scalars["last_counts"][name]) for name in self._last_counts},
            "_grad_seen": bool(scalars["grad_seen"]),
            "_recent": deque(((float(when), float(step)) for when, step in scalars["recent"]),
                             maxlen=self._recent.maxlen),
        }
        with self.lock:
            for name, value in values.items():
                setattr(self, name, value)
            self.version += 1

    # ------------------------------------------------------------ reading

    @property
    def scaler(self) -> str | None:
        return self.run_begin.scaler if self.run_begin else None

    @property
    def scaler_reason(self) -> str | None:
        return self.run_begin.scaler_reason if self.run_begin else None

    def max_steps(self) -> int | None:
        """The run's length: from its newest log, else its end, else its beginning."""
        for event in (self.last_log, self.run_end, self.run_begin):
            if event is not None and event.max_steps:
                return event.max_steps
        return None

    def problems(self) -> list[str]:
        """What the file held that is not shown: damaged lines, lines of a newer format."""
        said = [damaged_text(self.bad_lines)] if self.bad_lines else []
        said += [self.summary_problem] if self.summary_problem else []
        return said + ([newer_format_text(self.newer_version)] if self.newer_version else [])

    def throughput(self) -> Throughput:
        with self.lock:
            last, end = self.last_log, self.run_end
            step = end.step if end else last.step if last else None
            max_steps = self.max_steps()
            rate = self._recent_rate() or (last.steps_per_second if last else None)
            eta = None
            if rate and step is not None and max_steps and not end:
                eta = max(0.0, (max_steps - step) / rate)
            fraction = min(1.0, step / max_steps) if step is not None and max_steps else None
            return Throughput(step, max_steps, rate, last.tokens_per_second if last else None, eta, fraction)

    def _recent_rate(self) -> float | None:
        if len(self._recent) < 2:
            return None
        (t0, s0), (t1, s1) = self._recent[0], self._recent[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def _plain(event: Event | None) -> dict[str, Any] | None:
    return None if event is None else to_plain(event)


def _typed(value: Any, cls: type) -> Any:
    """A saved event back as its Struct (msgspec.ValidationError, a ValueError, when it does not fit)."""
    return None if value is None else msgspec.convert(value, cls)


# ---------------------------------------------------------------- whole files


def load_store(path: str | Path, store: MetricsStore | None = None, reader: ColumnReader | None = None) -> MetricsStore:
    """Read an events file to its end (from `reader`'s offset), a chunk at a time, into a store (tests, bench)."""
    store = store or MetricsStore()
    reader = reader or ColumnReader(Path(path))
    while True:
        before = reader.offset
        store.ingest_batch(reader.read_batch())
        if reader.offset == before:
            return store
