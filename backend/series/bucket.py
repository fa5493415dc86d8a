"""One plotted metric, bounded in memory however long the run: buckets over the whole run (each with
its lowest, highest and last point, so no spike is averaged away) and a ring of the newest raw points."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

BUCKETS = 1024
TAIL_POINTS = 4096
SMOOTHING = 0.9

Points = tuple[list[float], list[float]]


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
