"""Numbers as the monitor and the runs list print them."""

from __future__ import annotations


def size(n: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number readable."""
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - loop always returns


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def number(value: float | None, digits: int = 4) -> str:
    """A metric value: short, and exact enough to compare with the events file."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def step_of(step: int | None, max_steps: int | None) -> str:
    if step is None:
        return "-"
    return f"{step}/{max_steps}" if max_steps else str(step)
