"""Helpers for tests that run real trainings on the tiny model."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.contract.events import read_all
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import LaunchProfile, load_profile, save_profile
from backend.rundir.layout import RunFolder
from tests.timing import scaled, wait_until


def quick_profile(tmp_path: Path, name: str = "quickstart", **changes: dict[str, Any]) -> Path:
    """A shipped profile with some sections changed, saved into tmp_path."""
    data = load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml").model_dump()
    for section, values in changes.items():
        if isinstance(values, dict):
            data[section].update(values)
        else:
            data[section] = values
    data["name"] = f"{name}-test"
    path = tmp_path / f"{name}-test.toml"
    save_profile(LaunchProfile.model_validate(data), path)
    return path


def workbench(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`workbench ARGS` in a child; `timeout`: the idle machine's limit (scaled, tests/timing.py)."""
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], capture_output=True, text=True,
                          timeout=scaled(timeout), check=check)


def wait_for(condition: Callable[[], Any], timeout: float = 120, what: str = "condition") -> Any:
    """tests/timing.py wait_until (the limit scaled to the machine)."""
    return wait_until(condition, timeout, what)


def log_events(run: RunFolder, rank: int | None = 0) -> list[dict[str, Any]]:
    return [e for e in read_all(run.events_path) if e["type"] == "log" and (rank is None or e["rank"] == rank)]


def first_log_at(run: RunFolder, step: int) -> Callable[[], bool]:
    return lambda: any(e["step"] >= step for e in log_events(run))
