"""The start-time part of process identity, alone: the marker cannot decide (the process carries the
marker, or its environment is not ours to read), so only the recorded start time tells the recorded
process from another that got its pid."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from backend.core.process_identity import run_marker
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.faults import helpers as h

AN_HOUR = 3600.0


def test_a_marked_process_with_another_start_time_is_not_the_recorded_one(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    marked = h.sleeper(marker=run.path)
    marker = run_marker(run.path)
    assert marker.owns(marked.pid, h.started(marked.pid)) is not None
    assert marker.owns(marked.pid, h.started(marked.pid) - AN_HOUR) is None
    assert marker.gone(marked.pid, h.started(marked.pid) - AN_HOUR)
    assert not marker.gone(marked.pid, h.started(marked.pid))


def _environment_unreadable(monkeypatch: pytest.MonkeyPatch, pid: int) -> None:
    """The process `pid` as another user's: its environment cannot be read (psutil.AccessDenied)."""
    original = psutil.Process.environ

    def environ(self: psutil.Process) -> dict[str, str]:
        if self.pid == pid:
            raise psutil.AccessDenied(pid)
        return original(self)

    monkeypatch.setattr(psutil.Process, "environ", environ)


def test_a_recorded_pid_of_another_start_time_is_concluded_gone_and_never_signalled(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = h.sleeper()  # got the supervisor's pid after it died; its environment is not ours to read
    _environment_unreadable(monkeypatch, other.pid)
    run = h.fake_run(workspace, status="running", state={
        "supervisor_pid": other.pid, "supervisor_started": h.started(other.pid) - AN_HOUR})
    assert refresh(run).status == "unknown"  # proven gone by its start time alone
    assert "lost" in refresh(run).failure_reason
    assert stop_run(run) == ["run is already unknown; nothing to stop"]
    assert h.alive(other)


def test_a_recorded_pid_of_the_same_start_time_and_an_unreadable_environment_is_not_concluded(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = h.sleeper()
    _environment_unreadable(monkeypatch, other.pid)
    run = h.fake_run(workspace, status="running", state={
        "supervisor_pid": other.pid, "supervisor_started": h.started(other.pid)})
    assert refresh(run).status == "running"  # cannot be proven gone: shown as it is, never guessed
    assert stop_run(run) == ["no process of the run was alive"]  # and still never signalled
    assert h.alive(other)
