"""Numbers as the monitor and the runs list print them (sizes and durations: backend.core.units, the one formatter)."""

from __future__ import annotations

from backend.core.units import duration, size

__all__ = ["duration", "number", "size", "step_of"]


def number(value: float | None, digits: int = 4) -> str:
    """A metric value: short, and exact enough to compare with the events file."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def step_of(step: int | None, max_steps: int | None) -> str:
    if step is None:
        return "-"
    return f"{step}/{max_steps}" if max_steps else str(step)
