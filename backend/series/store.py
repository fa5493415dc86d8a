"""The store the monitor draws from: every series, the last events, throughput and overflow marks,
fed by `ingest` (typed events) or `ingest_batch` (decoded columns), and `load_store` for whole files."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from backend.contract.events import (
    Checkpoint,
    Eval,
    Event,
    Log,
    MemoryPhase,
    RunBegin,
    RunEnd,
    StepTime,
    damaged_text,
    newer_format_text,
    to_plain,
)
from backend.series.bucket import BUCKETS, SMOOTHING, TAIL_POINTS, Series, ema
from backend.series.decode import ColumnReader, EventBatch

MEMORY_STEPS = 8192  # the newest steps' memory readings kept for the memory panel (a long run: the newest)
# the columns that become plotted series
SERIES_NAMES = ("loss", "learning_rate", "grad_norm", "loss_scale")


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
        # rank 0's (step, largest micro-batch's tokens, memory) per step, from step_time (#37: creep vs length)
        self.memory_steps: deque[tuple[int, int, int]] = deque(maxlen=MEMORY_STEPS)
        self.memory_kind: str | None = None
        self.memory_limit: int | None = None
        self.attempts = 0
        self.log_events = 0
        self.bad_lines = 0  # lines of the file that were not events (torn, not JSON): skipped, and said
        self.newer_version: int | None = None  # lines of a newer events format: skipped, and said
        self.other_ranks: set[int] = set()
        self.overflow_total = 0
        self.skipped_total = 0
        self.grad_norm_lost_at: float | None = None  # first step whose grad norm was not finite
        self.version = 0  # bumped by every ingest that changed something
        self.summary_problem: str | None = None  # a damaged events summary, not used (backend.series.summary)
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
        elif isinstance(event, StepTime):
            self.memory_steps.extend(event.memory_steps())
            self.memory_kind = event.memory_kind or self.memory_kind
            self.memory_limit = event.memory_limit or self.memory_limit

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
