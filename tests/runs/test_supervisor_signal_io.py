"""The supervisor's signal handler does no file I/O (#34 item 16): a SIGUSR1 whose save request cannot be written
(save.request is a folder, as a full disk would refuse it) leaves the supervisor keeping its run. A hand-made
run resumed through `workbench resume`: the real supervisor, a plain sleeping command."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_a_sigusr1_whose_request_cannot_be_written_leaves_the_supervisor_keeping_its_run(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(4,))
    try:
        h.assert_clean_exit(h.cli("resume", run.run_id, "--detach"), (0,))
        state = h.wait_until(lambda: (s := run.read_state()).status == "running" and s.trainer_pid and s,
                             what="the resumed run's command")
        (run.path / "save.request").mkdir()
        os.kill(state.supervisor_pid, signal.SIGUSR1)
        watch_log = run.path / "watch" / "watch.log"
        h.wait_until(lambda: watch_log.is_file() and "SIGUSR1: the save request could not be written" in
                     watch_log.read_text(), what="the supervisor's word in watch.log")
        for pid in (state.supervisor_pid, state.trainer_pid):
            assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert refresh(run).status == "running"
        assert f"{run.path / 'save.request'} is a folder, not a request file" in watch_log.read_text()
    finally:
        stop_run(run)
    assert run.read_state().status == "stopped"
