"""Where the run registry lends the calibration its refresh (backend.cli.wiring registers it at start-up).

A module of its own, importing nothing heavy: every CLI and TUI start registers here, and none of them should
load the planner for it. Without a registration (a bare process) the calibration reads its cache as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Refresh = Callable[[], Any]  # -> backend.estimate.calibration.CacheFile
_refresh: Refresh | None = None


def register_refresh(refresh: Refresh) -> None:
    """Let the run registry bring the calibration's cache up to date before it is read."""
    global _refresh
    _refresh = refresh


def registered_refresh() -> Refresh | None:
    return _refresh
