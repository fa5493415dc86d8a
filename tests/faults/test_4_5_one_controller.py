"""Critical 4 and 5: resume only a stopped or failed run; one controller at a time (start, stop,
resume and delete hold the run's lock across their check and their act)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from backend.core.process_identity import run_marker
from backend.rundir.layout import FolderBusy
from backend.runs.continuation import continue_as_new_run
from backend.runs.delete import delete_run
from backend.runs.errors import RunRefused
from backend.runs.resume import resume_run
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.faults import helpers as h
from tests.timing import scaled


def test_resume_of_a_finished_run_is_refused_and_its_checkpoints_stay(workspace: Path) -> None:
    run = h.fake_run(workspace, status="finished", checkpoints=(5, 10))
    result = h.cli("resume", run.run_id, "--detach")
    h.assert_clean_exit(result, (2,))
    assert f"run {run.run_id} finished: resuming would train past its end" in result.output
    assert sorted(p.name for p in run.checkpoints()) == ["checkpoint-10", "checkpoint-5"]
    assert run.read_state().status == "finished" and run.read_state().attempt == 1
    assert run_marker(run.path).processes() == []


@pytest.mark.parametrize(("status", "said"), [
    ("starting", "is starting; stop it first"),
    ("running", "is running; stop it first"),
    ("stopping", "is stopping; stop it first"),
    ("damaged", "is damaged; only a stopped, failed or lost (unknown) run can be resumed"),
])
def test_resume_is_refused_for_any_status_but_stopped_failed_or_lost(workspace: Path, status: str, said: str) -> None:
    # lost (unknown, every process proven gone: a crash, a reboot) resumes: tests/runs/test_launch_and_resume_faults.py
    run = h.fake_run(workspace, status=status, checkpoints=(5,))
    with pytest.raises(RunRefused) as refused:
        resume_run(run)
    assert str(refused.value) == f"run {run.run_id} {said}"
    assert run.read_state().status == status and run.read_state().attempt == 1  # nothing started


def test_two_resumes_at_once_start_one_supervisor(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(3,))  # its "trainer" is a python sleep
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def resume() -> None:
        barrier.wait()
        try:
            resume_run(run)
            outcomes.append("resumed")
        except RunRefused as err:
            outcomes.append(f"refused: {err}")

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(30))
    try:
        assert outcomes.count("resumed") == 1
        refused = next(o for o in outcomes if o != "resumed")
        assert refused in (f"refused: run {run.run_id} is starting; stop it first",
                           f"refused: run {run.run_id} is running; stop it first")
        h.wait_until(lambda: refresh(run).status == "running", what="the resumed run to run")
        supervisors = [p for p in run_marker(run.path).processes() if "backend.cli.supervise" in p.cmdline()]
        assert len(supervisors) == 1
        assert run.read_state().attempt == 2
    finally:
        stop_run(run)
    assert run_marker(run.path).processes() == []
    assert run.read_state().status == "stopped"


def test_delete_waits_for_no_one_and_refuses_while_another_command_controls_the_run(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped")
    with run.control("stop"):
        with pytest.raises(RunRefused, match="another workbench command is controlling"):
            delete_run_fast(run)
    assert run.path.is_dir()


def delete_run_fast(run):  # type: ignore[no-untyped-def]
    """delete_run, but without the 10 s wait for the lock."""
    original = type(run).control

    def quick(self, what="change", wait=10.0):  # type: ignore[no-untyped-def]
        return original(self, what, wait=0.2)

    type(run).control = quick
    try:
        return delete_run(run)
    finally:
        type(run).control = original


def test_a_busy_lock_is_a_clear_error(workspace: Path) -> None:
    run = h.fake_run(workspace)
    with run.control("stop"):
        with pytest.raises(FolderBusy, match=f"controlling {run.run_id} right now"):
            with run.control("delete", wait=0.1):
                pass


def test_continue_as_new_run_refuses_what_it_cannot_prove(workspace: Path) -> None:
    # finished, a complete checkpoint, but a command that does not run swift: the model and data are unknown
    unknown = h.fake_run(workspace, "20260101-120000-fake-0002", checkpoints=(5,))
    with pytest.raises(RunRefused, match="its command.json does not say which model and data it used"):
        continue_as_new_run(unknown, workspace=workspace)
    stopped = h.fake_run(workspace, "20260101-120000-fake-0003", status="stopped", checkpoints=(5,))
    with pytest.raises(RunRefused, match="is stopped: only a finished run is continued as a new run; resume it"):
        continue_as_new_run(stopped, workspace=workspace)
    bare = h.fake_run(workspace, "20260101-120000-fake-0004")
    with pytest.raises(RunRefused, match="has no complete checkpoint to start a new run from"):
        continue_as_new_run(bare, workspace=workspace)
    assert sorted(p.name for p in workspace.iterdir()) == ["20260101-120000-fake-0002", "20260101-120000-fake-0003",
                                                            "20260101-120000-fake-0004"]  # no new run folder


def test_max_steps_without_as_new_run_is_refused(workspace: Path) -> None:
    run = h.fake_run(workspace, checkpoints=(5,))
    result = h.cli("resume", run.run_id, "--max-steps", "5")
    h.assert_clean_exit(result, (2,))
    assert "--max-steps goes with --as-new-run" in result.output
    assert run.read_state().status == "finished" and run.read_state().attempt == 1
