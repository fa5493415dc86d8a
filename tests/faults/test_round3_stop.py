"""`stop` believes only what is proven (#29 High 5, Medium 10): a `slurm_job.json` in a run folder is
passed to scancel only when it holds a job id, a scancel that cannot run falls back to the local
signals, and a read-only run folder still has its proven processes stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes import fake_executable
from tests.faults import helpers as h


def _fake_scancel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `scancel` first on PATH that records its arguments, one call a line."""
    bin_dir = tmp_path / "bin"
    calls = tmp_path / "scancel.calls"
    fake_executable(bin_dir, "scancel", f'#!/bin/sh\necho "$@" >> {calls}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return calls


@pytest.mark.parametrize("content", [{"SLURM_JOB_ID": "--user=root"}, [1, 2], {"SLURM_JOB_ID": "12 --full"}])
def test_a_job_file_without_a_job_id_is_never_passed_to_scancel(
        workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: object) -> None:
    calls = _fake_scancel(tmp_path, monkeypatch)
    run = h.fake_run(workspace, status="running", state={"host": "node7-of-the-cluster"})
    (run.path / "slurm_job.json").write_text(json.dumps(content))
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (1,))
    assert not calls.exists()
    assert "slurm_job.json holds no SLURM job id" in result.output
    assert "nothing was signalled from here" in result.output
    assert run.read_state().status == "running"  # said as it is: not "stopping" while it trains on


def test_a_job_id_goes_to_scancel_alone(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_scancel(tmp_path, monkeypatch)
    run = h.fake_run(workspace, status="running", state={"host": "node7-of-the-cluster"})
    (run.path / "slurm_job.json").write_text(json.dumps({"SLURM_JOB_ID": "4711_3"}))
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (0,))
    assert calls.read_text() == "--signal=INT --full 4711_3\n"
    assert "sent SIGINT to SLURM job 4711_3 (scancel)" in result.output


def test_a_missing_scancel_falls_back_to_the_local_signals(
        workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = h.fake_run(workspace, status="running")
    trainer = h.sleeper(marker=run.path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no scancel anywhere
    run.update_state(supervisor_pid=trainer.pid, supervisor_started=h.started(trainer.pid))
    (run.path / "slurm_job.json").write_text(json.dumps({"SLURM_JOB_ID": 4711}))
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (0,))
    assert "scancel 4711 could not run" in result.output
    assert "sent SIGINT to 1 process(es) - all exited" in result.output
    assert not h.alive(trainer)
    assert run.read_state().status == "stopped"


def test_a_read_only_run_folder_still_has_its_processes_stopped(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    trainer = h.sleeper(marker=run.path)
    stranger = h.sleeper()
    run.update_state(supervisor_pid=trainer.pid, supervisor_started=h.started(trainer.pid))
    (run.path / ".control.lock").mkdir()  # as a read-only folder would: the lock file cannot be opened
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (0,))
    assert "sent SIGINT to 1 process(es) - all exited" in result.output
    assert "the folder is not writable" in result.output
    assert not h.alive(trainer)
    assert h.alive(stranger)


def test_a_read_only_run_folder_with_nothing_to_stop_exits_non_zero(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    stranger = h.sleeper()  # the recorded supervisor's pid, now another's process: never signalled
    run.update_state(supervisor_pid=stranger.pid, supervisor_started=h.started(stranger.pid),
                     host="node7-of-the-cluster")
    (run.path / ".control.lock").mkdir()
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (1,))
    assert "nothing was signalled from here" in result.output
    assert h.alive(stranger)
