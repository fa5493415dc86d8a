"""Fault tests: each gets its own workspace and index (see tests/conftest.py isolated_runs), and every
`sleep` a test starts is killed when it ends, whatever the outcome."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import helpers


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


@pytest.fixture(autouse=True)
def _no_leftover_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[subprocess.Popen[bytes]] = []
    original = helpers.sleeper

    def tracked(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = original(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(helpers, "sleeper", tracked)
    yield
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
