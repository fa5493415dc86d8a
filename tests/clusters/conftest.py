"""Cluster tests: each gets its own workspace and index (tests/conftest.py isolated_runs)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs
