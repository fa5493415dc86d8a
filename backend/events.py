"""The events file: the contract between the training process and everything that watches it.

`events.jsonl` is append-only, one JSON object per line. Every line has
`v` (schema version), `type`, `time` (unix seconds) and `rank`. Types and their fields:

- `run_begin`: precision, mixed_precision, scaler (class name or null), scaler_reason,
  distributed_type, world_size, devices, trainable_params, total_params, param_dtype, max_steps
- `log`: step, max_steps, epoch, loss, learning_rate, grad_norm, token_acc, nonfinite (names of the
  values above that were NaN/inf and are written as null), loss_scale,
  overflow_count, skipped_steps, steps_per_second, tokens_per_second, rss_bytes,
  cuda (list of {device, allocated, reserved, max_allocated, max_reserved}) when CUDA is used
- `eval`: step, metrics ({eval_loss: ...})
- `checkpoint`: step, path
- `run_end`: step, status ("finished"), runtime_seconds, peak_rss_bytes, cuda_peaks

The writer (inside the trainer, any rank) appends whole lines with one `write` on an
O_APPEND descriptor, so lines from several ranks never interleave. The reader keeps its
offset and only ever reads what was appended since; a half-written last line waits for
its newline. This module is stdlib only: it is imported inside the training process too.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
EVENT_TYPES = ("run_begin", "log", "eval", "checkpoint", "run_end")
EVENTS_FILE_NAME = "events.jsonl"


def make_event(event_type: str, rank: int, **fields: Any) -> dict[str, Any]:
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    return {"v": SCHEMA_VERSION, "type": event_type, "time": time.time(), "rank": rank, **fields}


class EventWriter:
    """Appends events; safe for several processes writing one file."""

    def __init__(self, path: str | Path, rank: int = 0):
        self.path = Path(path)
        self.rank = rank
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event_type: str, **fields: Any) -> dict[str, Any]:
        event = make_event(event_type, self.rank, **fields)
        line = json.dumps(event, separators=(",", ":"), default=_jsonable) + "\n"
        os.write(self._fd, line.encode("utf-8"))
        return event

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _jsonable(value: Any) -> Any:
    """Numbers from numpy/torch scalars, everything else as text."""
    if hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    return str(value)


@dataclass
class EventReader:
    """Incremental reader: `read_new()` returns only events appended since the last call."""

    path: Path
    offset: int = 0
    bad_lines: int = 0
    _partial: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    def read_new(self, max_bytes: int | None = None) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read() if max_bytes is None else handle.read(max_bytes)
        except FileNotFoundError:
            return []
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        # everything after the last newline is a line still being written: keep it for later
        complete, _, self._partial = data.rpartition(b"\n")
        return self._parse(complete)

    def _parse(self, block: bytes) -> list[dict[str, Any]]:
        events, bad = parse_event_lines(block)
        self.bad_lines += bad
        return events


def parse_event_lines(block: bytes) -> tuple[list[dict[str, Any]], int]:
    """Events of a block of complete lines, and how many lines were not events (bad JSON, no type)."""
    events: list[dict[str, Any]] = []
    bad = 0
    for raw in block.split(b"\n"):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8 (a damaged line is counted, never fatal)
            bad += 1
            continue
        if isinstance(event, dict) and "type" in event:
            events.append(event)
        else:
            bad += 1
    return events, bad


def read_all(path: str | Path) -> list[dict[str, Any]]:
    """Every complete event in a file (for small files and tests)."""
    return EventReader(Path(path)).read_new()
