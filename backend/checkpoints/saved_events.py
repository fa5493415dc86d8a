"""The events a scoreboard needs, read from a run's events.jsonl: the rank-0 train loss per step, the
metric of each evaluation, the steps of the saves, and which steps' lines are damaged (so a value says
"damaged" rather than an older one). Read once; a redraw reads only the lines appended since."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.contract.events import SCHEMA_VERSION, Checkpoint, Eval, Log, decode_line, decode_lines, line_version
from backend.core.tail import Tail, mark

_STEP = re.compile(rb'"step"\s*:\s*(\d+)')
_TYPE = re.compile(rb'"type"\s*:\s*"(\w+)"')


@dataclass
class SavedEvents:
    logs: dict[int, float | None] = field(default_factory=dict)  # step -> rank-0 loss (the last written)
    evals: dict[int, float | None] = field(default_factory=dict)  # step -> the metric
    saved: set[int] = field(default_factory=set)  # steps of Checkpoint events
    damaged: dict[str, set[int]] = field(default_factory=lambda: {"log": set(), "eval": set()})
    bad_lines: int = 0
    long_lines: int = 0  # lines over the tail's bound (damaged too)
    newer_version: int | None = None


_EVENTS_CACHE: dict[tuple[str, str], tuple[tuple[int, int], Tail, SavedEvents]] = {}


def read_saved_events(path: Path, metric_key: str) -> SavedEvents:
    """The run's events as far as they are written; what was read before (the same file, not shorter) is
    kept and only the lines appended since are read (the monitor redraws the scoreboard as a run goes on)."""
    key = (str(path), metric_key)
    now = mark(path)
    if now is None:
        return SavedEvents()
    identity = (now.device, now.inode)
    cached = _EVENTS_CACHE.get(key)
    if cached is not None and cached[0] == identity and now.size >= cached[1].offset:
        tail, found = cached[1], cached[2]
    else:
        tail, found = Tail(path), SavedEvents()
        if len(_EVENTS_CACHE) >= 64:
            _EVENTS_CACHE.clear()
        _EVENTS_CACHE[key] = (identity, tail, found)
    while True:
        before = tail.offset
        block = tail.read_block()
        if tail.offset == before:
            break
        decoded = decode_lines(block)
        if decoded.bad_lines or decoded.newer_version is not None:
            for raw in block.split(b"\n"):
                if raw.strip():
                    _note(found, raw, metric_key)
        else:
            for event in decoded.events:
                _take(found, event, metric_key)
    found.long_lines = tail.long_lines
    return found


def _take(found: SavedEvents, event: Any, metric_key: str) -> None:
    if isinstance(event, Log) and event.rank == 0 and event.step is not None:
        found.logs[event.step] = event.loss
    elif isinstance(event, Eval) and event.rank == 0 and event.step is not None and metric_key in event.metrics:
        found.evals[event.step] = event.metrics[metric_key]
    elif isinstance(event, Checkpoint) and event.step is not None:
        found.saved.add(event.step)


def _note(found: SavedEvents, raw: bytes, metric_key: str) -> None:
    event = decode_line(raw)
    if event is not None:
        _take(found, event, metric_key)
        return
    version = line_version(raw)
    if version is not None and version > SCHEMA_VERSION:
        found.newer_version = max(version, found.newer_version or 0)
        return
    found.bad_lines += 1
    kind, step = _TYPE.search(raw), _STEP.search(raw)
    if kind and step and kind.group(1).decode() in found.damaged:
        found.damaged[kind.group(1).decode()].add(int(step.group(1)))


def clear_cache() -> None:
    """Forget what was read (a benchmark's cold read)."""
    _EVENTS_CACHE.clear()
