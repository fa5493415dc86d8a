"""Writing the events file (the trainer's side of the contract, and tests' and benches' fakes): one event a
line, appended with O_APPEND so several processes (the ranks) can write one file. The schema: events.py."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec

from backend.contract.events import EVENT_CLASSES, Event

_ENCODER = msgspec.json.Encoder()


def make_event(event_type: str, rank: int, **fields: Any) -> Event:
    """The event of `event_type` with these fields; TypeError for a type or a field the schema lacks,
    msgspec.ValidationError for a value of the wrong shape."""
    cls = EVENT_CLASSES.get(event_type)
    if cls is None:
        raise ValueError(f"unknown event type {event_type!r}")
    unknown = set(fields) - set(cls.__struct_fields__)
    if unknown:
        raise TypeError(f"{event_type} events have no field {', '.join(sorted(unknown))}")
    values = {"time": time.time(), "rank": rank, **{k: _plain(v) for k, v in fields.items()}}
    return msgspec.convert(values, cls)  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    """Numbers from numpy/torch scalars (the trainer's values)."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    return value


def encode(event: Event) -> bytes:
    """One line of the file (with its newline)."""
    return _ENCODER.encode(event) + b"\n"


class EventWriter:
    """Appends events; safe for several processes writing one file."""

    def __init__(self, path: str | Path, rank: int = 0):
        self.path = Path(path)
        self.rank = rank
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event_type: str, **fields: Any) -> Event:
        event = make_event(event_type, self.rank, **fields)
        os.write(self._fd, encode(event))
        return event

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
