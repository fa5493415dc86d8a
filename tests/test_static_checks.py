"""The static checks CI runs through pytest: ruff (pyflakes, bugbear, isort) on all the Python, and mypy on
backend/ (configured in pyproject.toml). Each failure prints the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.timing import scaled

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(1800))


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "--no-fix", "backend", "tui", "tests", "bench")
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}{result.stderr}"


@pytest.mark.slow  # a cold mypy takes minutes: the quick tier leaves it to `.venv/bin/mypy`
def test_mypy_finds_nothing() -> None:
    # the cache lives in .mypy_cache/ (ignored by git): a cold run takes minutes, a warm one seconds
    result = _run("mypy")
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}{result.stderr}"
