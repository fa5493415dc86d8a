"""What a detector found: a kind, a message said once, the step and the evidence (backend/watch/detectors.py
lists the detectors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.contract.events import Event, Log


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def rank0_log(event: Event) -> Log | None:
    """The event when it is a rank-0 log with a step (what most detectors follow)."""
    return event if isinstance(event, Log) and event.rank == 0 and event.step is not None else None
