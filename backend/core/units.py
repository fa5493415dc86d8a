"""Binary size units and the one way sizes and durations are written (ground floor: imports nothing of ours)."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30


def gib(n: float | None, digits: int = 1) -> str:
    """Bytes as a number of GiB, without the unit: `12.3` (digits=1), `1,536` (digits=0); None: `N/A`."""
    return "N/A" if n is None else f"{n / GIB:,.{digits}f}"


def size(n: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number readable: `512 B`, `3.4 MiB`, `12.0 GiB`."""
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def duration(seconds: float | None, short: bool = False) -> str:
    """A duration: `3m05s`, `1h02m`, `2d03h`; None: `-`. `short` (the status line) writes `45s`, not `0m45s`."""
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    if seconds >= 86_400:
        return f"{seconds // 86_400}d{seconds % 86_400 // 3600:02d}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if short and seconds < 60:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60:02d}s"
