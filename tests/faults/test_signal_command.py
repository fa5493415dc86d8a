"""`workbench signal RUN save-and-stop` and the supervisor's pid in `workbench status` (#41): SIGUSR1
goes to the supervisor recorded in state.json only when it is proven the run's."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.faults import helpers as h
from tests.timing import scaled


def test_signal_save_and_stop_sends_sigusr1_to_the_proven_supervisor_and_says_so(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    supervisor = h.sleeper(marker=run.path)
    try:
        run.update_state(supervisor_pid=supervisor.pid, supervisor_started=h.started(supervisor.pid))
        shown = h.cli("status", run.run_id)
        assert (f"  supervisor: pid {supervisor.pid} (save and stop: `workbench signal {run.run_id} save-and-stop` "
                "sends it SIGUSR1)") in shown.output
        result = h.cli("signal", run.run_id, "save-and-stop")
        h.assert_clean_exit(result, (0,))
        assert result.output == (f"sent SIGUSR1 to the supervisor of run {run.run_id} (pid {supervisor.pid}): the "
                                 "trainer saves a checkpoint at the end of its step, then the run ends `stopped`; "
                                 f"follow it with `workbench status {run.run_id}`\n")
        assert supervisor.wait(scaled(5)) == -signal.SIGUSR1  # a plain sleep dies of it: it got the signal
    finally:
        supervisor.kill()
        supervisor.wait()


def test_signal_spares_a_pid_planted_in_state_json(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    stranger = h.sleeper()  # alive, but without the run's marker
    keeper = h.sleeper(marker=run.path)  # the run is alive through another process
    try:
        run.update_state(supervisor_pid=stranger.pid, supervisor_started=h.started(stranger.pid))
        result = h.cli("signal", run.run_id, "save-and-stop")
        h.assert_clean_exit(result, (2,))
        assert (f"the supervisor recorded in state.json (pid {stranger.pid}) is not provably this run's (gone, "
                "another start time, or no run marker): nothing was signalled") in " ".join(result.output.split())
        assert h.alive(stranger) and h.alive(keeper)
    finally:
        for proc in (stranger, keeper):
            proc.kill()
            proc.wait()


def test_signal_to_a_finished_run_says_there_is_no_supervisor(workspace: Path) -> None:
    run = h.fake_run(workspace, status="finished")
    result = h.cli("signal", run.run_id, "save-and-stop")
    h.assert_clean_exit(result, (2,))
    assert f"run {run.run_id} is finished: there is no supervisor to signal" in " ".join(result.output.split())
