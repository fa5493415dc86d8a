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


def unit_for(largest: float) -> tuple[str, int]:
    """The binary unit a table of sizes is written in: the largest that keeps its largest value at 1 or more
    (`("MiB", MIB)` for a table whose largest is 600 MiB), so small models show small numbers, not 0.00 GiB."""
    for name, factor in (("GiB", GIB), ("MiB", MIB)):
        if abs(largest) >= factor:
            return name, factor
    return "KiB", KIB


def in_unit(n: float, unit: tuple[str, int], digits: int = 2) -> str:
    """Bytes as a number of `unit` (from unit_for), without the unit: `604.00`."""
    return f"{n / unit[1]:,.{digits}f}"


def count(n: float | None) -> str:
    """A count of things (parameters, tokens) as people say it: `7.62B`, `1.2M`, `350K`, `638`."""
    if n is None:
        return "n/a"
    for suffix, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= factor:
            value = n / factor
            return f"{value:.2f}{suffix}" if value < 10 else f"{value:.1f}{suffix}" if value < 100 \
                else f"{value:.0f}{suffix}"
    return f"{n:.0f}"


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
