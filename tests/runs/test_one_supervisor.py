"""The one supervisor (backend/rundir/supervise.py) for runs and jobs: a stop that comes before the
command starts is never lost; the reconciler concludes without sleeping."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from backend.core.process_identity import JOB_MARKER_ENV, run_marker
from backend.jobs.job import JobSpec, create_job
from backend.rundir.process import start_detached, supervisor_argv
from backend.rundir.supervise import SignalRelay
from backend.runs import status
from tests.faults import helpers as h
from tests.timing import scaled


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def _term_while_it_waits_for_its_state_lock(folder: Path, argv: list[str], env: dict[str, str]) -> None:
    """Start a supervisor while the test holds the folder's state lock, so it is caught between its
    start and its command's; SIGTERM it there, then let it go on and wait for its end."""
    with open(folder / ".state.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid, _started = start_detached(argv, env, folder, folder / "output.log")
        h.wait_until(lambda: any(f.path.endswith(".state.lock") for f in _open_files(pid)), timeout=60,
                     what="the supervisor waiting for the state lock")
        os.kill(pid, signal.SIGTERM)
    h.wait_until(lambda: _gone(pid), timeout=60, what="the supervisor's end")


def _open_files(pid: int) -> list[psutil._common.popenfile]:
    try:
        return psutil.Process(pid).open_files()
    except psutil.Error:
        return []


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_run_stopped_before_its_trainer_starts_records_stopped_and_never_trains(workspace: Path) -> None:
    trained = workspace / "trained"
    run = h.fake_run(workspace, status="starting", argv=["touch", str(trained)])
    marker = run_marker(run.path)
    _term_while_it_waits_for_its_state_lock(run.path, supervisor_argv(run.path), {marker.env: marker.value})
    state = run.read_state()
    assert (state.status, state.trainer_pid, state.stop_requested) == ("stopped", None, True)
    assert not trained.exists()


def test_a_job_stopped_before_its_command_starts_records_stopped(workspace: Path) -> None:
    ran = workspace / "ran"
    spec = JobSpec(kind="infer", description="fake", argv=["touch", str(ran)], cwd=str(workspace),
                   output=str(workspace / "o"))
    job = create_job(workspace / "jobs", spec)
    _term_while_it_waits_for_its_state_lock(job.path, [sys.executable, "-m", "backend.cli.supervise", "job", str(job.path)],
                                            {JOB_MARKER_ENV: str(job.path)})
    state = job.read_state()
    assert (state.status, state.child_pid, state.stop_requested) == ("stopped", None, True)
    assert not ran.exists()


def test_a_sigterm_that_came_before_the_command_existed_reaches_it_once_started() -> None:
    # every signal install() sets, SIGUSR1 included: an ignored signal outlives exec, so a SIGUSR1 left ignored
    # here was inherited by every later child of this worker (the signal command's test saw its `sleep` ignore it)
    relayed = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    saved = {sig: signal.getsignal(sig) for sig in relayed}
    relay = SignalRelay().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # handled here: remembered, nothing to pass it to yet
        child = subprocess.Popen(["sleep", "60"])
        relay.attach(child)
        assert child.wait(timeout=scaled(10)) == -signal.SIGTERM
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_run_whose_supervisor_is_gone_is_concluded_without_sleeping(workspace: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run = h.fake_run(workspace, status="running", state={"supervisor_pid": dead.pid, "supervisor_started": 1.0})

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s")

    monkeypatch.setattr(status.time, "sleep", no_sleep)
    state = status.refresh(run)
    assert state.status == "unknown"
    assert state.failure_reason.startswith("lost: the supervisor and every process of the run are gone")


def test_a_command_that_cannot_start_is_recorded_failed_with_why(workspace: Path) -> None:
    run = h.fake_run(workspace, status="starting", argv=["/nonexistent/launcher", "--model", "m"])
    marker = run_marker(run.path)
    pid, _started = start_detached(supervisor_argv(run.path), {marker.env: marker.value}, run.path, run.log_path)
    h.wait_until(lambda: _gone(pid), timeout=60, what="the supervisor's end")
    state = status.refresh(run)
    assert (state.status, state.trainer_pid) == ("failed", None)
    assert state.failure_reason == ("its command could not be started: [Errno 2] No such file or directory: "
                                    "'/nonexistent/launcher'")
