"""events.summary.npz: the metrics store of a run's events.jsonl up to a line, so that opening a
long run reads only what was written after it.

A run of 1,000,000 logged steps has a 330 MiB events file; parsing it all takes seconds, while the
store it builds is bounded (buckets + the newest points, ~1 MiB). The run's supervisor keeps that
store beside the events file (`SummaryKeeper`, saved every SAVE_EVERY_BYTES of new events and when
the run ends); a reader restores it and reads on from its offset.

A summary is only a shortcut, never a source: it is used only when it provably describes the file
as it is now (same file, at least as long, the same bytes at its start and before its offset) and
was made by this very store code (a digest of the backend/series package). Anything else, damaged or stale,
is rejected with the reason, and the reader reads the whole file. No pickle: arrays and JSON.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import numpy as np

from backend import series
from backend.core.fs import write_bytes_atomic
from backend.core.safe_text import visible
from backend.series import TAIL_POINTS, ColumnReader, MetricsStore, load_store

FORMAT = 1
SUMMARY_NAME = "events.summary.npz"
SAVE_EVERY_BYTES = 8 << 20  # at most this much of the file is read again after a summary (~25,000 steps)
KEEP_SECONDS = 15.0  # how often the supervisor's keeper reads what was appended
CHECKED_BYTES = 64 << 10  # the file's first and last bytes before the offset, hashed
META_BYTES = 4 << 20  # the JSON member's most (markers, checkpoints and recent steps are bounded: ~100 KiB)
TAIL_POINTS_BYTES = TAIL_POINTS * 8  # the newest-points ring, float64
ARRAY_HEADER_BYTES = 4096  # an .npy member's header, beyond its values

Count = Annotated[int, msgspec.Meta(ge=0)]


class SeriesScalars(msgspec.Struct, forbid_unknown_fields=True):
    """One series' saved scalars (Series.state()), each of its type."""

    buckets: int
    tail: int
    width: Annotated[float, msgspec.Meta(gt=0)]
    origin: float | None
    count: Count
    last: tuple[float, float] | None
    tail_from_start: bool


class StoreScalars(msgspec.Struct, forbid_unknown_fields=True):
    """The store's saved scalars (MetricsStore.state()); events stay plain here and are typed by the store."""

    smoothing: float
    series: dict[str, SeriesScalars]
    markers: list[tuple[float, float | None, Count]]
    markers_kept: int
    run_begin: dict[str, Any] | None
    run_end: dict[str, Any] | None
    last_log: dict[str, Any] | None
    last_eval: dict[str, Any] | None
    newer_version: int | None
    checkpoints: list[tuple[int, str]]
    attempts: Count
    log_events: Count
    bad_lines: Count
    other_ranks: list[int]
    overflow_total: Count
    skipped_total: Count
    grad_norm_lost_at: float | None
    ema: float
    ema_n: Count
    last_counts: dict[str, float]
    grad_seen: bool
    recent: list[tuple[float, float]]


class SummaryMeta(msgspec.Struct, forbid_unknown_fields=True):
    """The summary's `meta` member: what made it, the events file it describes, and the store's scalars."""

    format: int
    store_code: str
    offset: Count
    device: int
    inode: int
    size: Count
    head_sha256: str
    tail_sha256: str
    store: StoreScalars


class Damaged(Exception):
    """The summary file is not one this code wrote: the reason, said as "damaged summary: <why>"."""


def summary_path(events_path: Path) -> Path:
    return Path(events_path).with_name(SUMMARY_NAME)


@cache
def store_code() -> str:
    """A digest of the code that builds a store: a summary made by other code is not trusted."""
    digest = hashlib.sha256()
    for file in sorted(Path(series.__file__).parent.glob("*.py")):  # the package: every module of it
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Restored:
    offset: int  # the events file's bytes the store now holds: read on from here


@dataclass(frozen=True)
class Rejected:
    reason: str  # why the summary is not used ("none", "events.jsonl was replaced", ...)
    damaged: bool = False  # not a summary this code wrote: said to the user, not only skipped


# ---------------------------------------------------------------- saving


def save_summary(store: MetricsStore, events_path: Path, offset: int) -> Path:
    """Write the store, which holds events_path's first `offset` bytes (whole lines), atomically."""
    events_path = Path(events_path)
    arrays, scalars = store.state()
    meta = {"format": FORMAT, "store_code": store_code(), "offset": offset, **_fingerprint(events_path, offset),
            "store": scalars}
    buffer = io.BytesIO()
    named: dict[str, Any] = {"meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays}
    np.savez_compressed(buffer, **named)
    path = summary_path(events_path)
    write_bytes_atomic(path, buffer.getvalue(), mode=0o644)
    return path


class _Fingerprint(TypedDict):
    device: int
    inode: int
    size: int
    head_sha256: str
    tail_sha256: str


def _fingerprint(events_path: Path, offset: int) -> _Fingerprint:
    """What ties a summary to the file: its identity, its size and the hashes of the bytes it was made from
    (one open: a file replaced between a stat and the read cannot pass as the old one)."""
    with open(events_path, "rb") as handle:
        info = os.fstat(handle.fileno())
        head = handle.read(min(offset, CHECKED_BYTES))
        handle.seek(max(0, offset - CHECKED_BYTES))
        tail = handle.read(offset - max(0, offset - CHECKED_BYTES))
    return {"device": info.st_dev, "inode": info.st_ino, "size": info.st_size,
            "head_sha256": hashlib.sha256(head).hexdigest(), "tail_sha256": hashlib.sha256(tail).hexdigest()}


# ---------------------------------------------------------------- restoring


def load_summary(events_path: Path, store: MetricsStore) -> Restored | Rejected:
    """Fill `store` (in place) with the saved one if that provably holds the start of events_path as the
    file is now; else leave `store` as it was and say why not."""
    events_path = Path(events_path)
    path = summary_path(events_path)
    if not path.is_file():
        return Rejected("none")
    expected, _scalars = store.state()
    try:
        with open(path, "rb") as handle:
            _check_members(handle, expected)  # names and sizes from the zip's directory, nothing decompressed yet
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as saved:
                meta = _meta(json.loads(saved["meta"].tobytes()))
                if (why := _stale(meta, events_path)) is not None:
                    return Rejected(why)
                arrays = {name: saved[name] for name in expected}
        _check_store(meta.store, store)
        store.restore_state(arrays, msgspec.to_builtins(meta.store))
        return Restored(meta.offset)
    except Damaged as err:
        return Rejected(f"damaged summary: {err}", damaged=True)
    except Exception as err:  # a torn, foreign or damaged file: not a summary of this run
        return Rejected(f"damaged summary: {type(err).__name__}: {err}", damaged=True)


def _check_members(handle: Any, expected: dict[str, np.ndarray]) -> None:
    """Exactly the members this code writes, none larger than its kind can be (a small file may hold a
    member of gigabytes: it is refused before anything is decompressed)."""
    members = {info.filename: info for info in zipfile.ZipFile(handle).infolist()}
    wanted = {f"{name}.npy" for name in expected} | {"meta.npy"}
    if unknown := sorted(set(members) - wanted):
        raise Damaged(f"unknown member {unknown[0]!r}")
    if missing := sorted(wanted - set(members)):
        raise Damaged(f"member {missing[0]!r} is missing")
    most = max(TAIL_POINTS_BYTES, max(values.nbytes for values in expected.values())) + ARRAY_HEADER_BYTES
    for name, info in members.items():
        limit = META_BYTES if name == "meta.npy" else most
        if info.file_size > limit:
            raise Damaged(f"member {name!r} holds {info.file_size:,} bytes (at most {limit:,})")


def _meta(plain: Any) -> SummaryMeta:
    try:
        return msgspec.convert(plain, SummaryMeta)
    except msgspec.ValidationError as err:
        raise Damaged(f"meta: {err}") from None


def _check_store(saved: StoreScalars, store: MetricsStore) -> None:
    """The sizes the store was made with are this store's (they bound what restoring allocates)."""
    scalars = store.state()[1]
    if saved.markers_kept != scalars["markers_kept"]:
        raise Damaged(f"meta: markers_kept {saved.markers_kept}, expected {scalars['markers_kept']}")
    for name, own in scalars["series"].items():
        got = saved.series.get(name)
        if got is None or (got.buckets, got.tail) != (own["buckets"], own["tail"]):
            raise Damaged(f"meta: series {name!r} sized {got and (got.buckets, got.tail)}, "
                          f"expected {(own['buckets'], own['tail'])}")


def _stale(meta: SummaryMeta, events_path: Path) -> str | None:
    if meta.format != FORMAT or meta.store_code != store_code():
        return "made by another version of the workbench"
    try:
        now = _fingerprint(events_path, meta.offset)
    except OSError:
        return "events.jsonl is missing"
    if (now["device"], now["inode"]) != (meta.device, meta.inode):
        return "events.jsonl was replaced since"
    if now["size"] < meta.offset:
        return "events.jsonl is shorter than when it was summarised"
    if (now["head_sha256"], now["tail_sha256"]) != (meta.head_sha256, meta.tail_sha256):
        return "events.jsonl was rewritten since"
    return None


def restore_or_read(events_path: Path, store: MetricsStore) -> tuple[ColumnReader, str]:
    """A reader positioned after what `store` holds: after the summary restored into it when that is
    valid, else at the file's start (`store` untouched). The second value says which."""
    found = load_summary(events_path, store)
    if isinstance(found, Restored):
        return ColumnReader(events_path, found.offset), f"summary of the first {found.offset:,} bytes"
    if found.damaged:
        store.summary_problem = f"{visible(found.reason, limit=200)} (the whole events file is read instead)"
    return ColumnReader(events_path), f"no summary used ({found.reason})"


def load_run_store(events_path: Path) -> MetricsStore:
    """A run's whole store: the summary (when valid) and the events after it (the compare view)."""
    store = MetricsStore()
    reader, _how = restore_or_read(events_path, store)
    return load_store(events_path, store, reader)


# ---------------------------------------------------------------- keeping (in the run's supervisor)


class SummaryKeeper:
    """Reads the growing events file into a store and saves it every SAVE_EVERY_BYTES and at the end."""

    def __init__(self, events_path: Path, every_bytes: int = SAVE_EVERY_BYTES):
        self.events_path = Path(events_path)
        self.every_bytes = every_bytes
        self.store = MetricsStore()
        self.reader, _how = restore_or_read(self.events_path, self.store)
        self.saved_offset = self.reader.offset

    def catch_up(self, final: bool = False) -> None:
        """Read to the end of the file; save on the way when enough is new, and at the end if `final`."""
        while True:
            before = self.reader.offset
            self.store.ingest_batch(self.reader.read_batch())
            if self.reader.offset == before:
                break
            if self.reader.offset - self.saved_offset >= self.every_bytes:
                self.save()
        if final and self.reader.offset > self.saved_offset:
            self.save()

    def save(self) -> None:
        save_summary(self.store, self.events_path, self.reader.offset)
        self.saved_offset = self.reader.offset


class KeeperThread:
    """The supervisor's keeper: a daemon thread; its failures go to <run>/watch/watch.log, never further."""

    def __init__(self, events_path: Path, log_failure: Callable[[str], None], every_seconds: float = KEEP_SECONDS):
        self.events_path, self.log_failure, self.every_seconds = Path(events_path), log_failure, every_seconds
        self.keeper: SummaryKeeper | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workbench-summary", daemon=True)

    def start(self) -> KeeperThread:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_seconds):
            self._step(final=False)

    def _step(self, final: bool) -> None:
        try:
            if self.keeper is None:
                self.keeper = SummaryKeeper(self.events_path)
            self.keeper.catch_up(final=final)
        except Exception:
            self.log_failure(f"events summary not kept\n{traceback.format_exc()}")

    def finish(self, timeout: float = 60.0) -> None:
        """The run has ended: read its last events and save the summary once more."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():  # still reading (a stuck disk): two readers of one store would race
            self.log_failure("events summary: the keeper did not finish in time; last summary not saved")
            return
        self._step(final=True)
