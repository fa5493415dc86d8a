"""Launch gives back what it took when it fails; a run of this host resumes after a reboot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.core.process_identity import current_boot_id
from backend.rundir import index
from backend.runs import start
from backend.runs.errors import LaunchRefused, RunRefused
from backend.runs.outputs import output_dir_problem
from backend.runs.resume import resume_run
from backend.runs.start import start_run
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.faults import helpers as h
from tests.runs.helpers import quick_profile


def test_a_launch_that_fails_after_claiming_its_output_folder_leaves_it_free(
        isolated_runs: Path, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    profile = quick_profile(tmp_path, output={"output_dir": str(out)})

    def no_room(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(start, "start_detached", no_room)
    from backend.profile import load_profile

    with pytest.raises(LaunchRefused, match="No space left on device"):
        start_run(load_profile(profile))
    assert output_dir_problem(out) is None  # free for the next launch
    assert list(out.iterdir()) == []
    assert index.known_folders() == []
    assert not index.index_path().is_file() or index.index_path().read_text() == ""
    assert list(isolated_runs.iterdir()) == []


def test_forget_takes_back_only_the_failed_runs_index_line(isolated_runs: Path, tmp_path: Path) -> None:
    index.register(tmp_path / "kept")
    index.register(tmp_path / "failed")
    with open(index.index_path(), "ab") as handle:
        handle.write(b"not json\n")
    index.forget(tmp_path / "failed")
    assert index.index_path().read_text() == json.dumps({"path": str(tmp_path / "kept")}) + "\nnot json\n"


def test_a_run_stopped_before_this_host_rebooted_resumes(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(2,), state={"boot_id": "an-earlier-boot"})
    resume_run(run)
    state = run.read_state()
    assert state.attempt == 2
    assert state.resumed_from == str(run.path / "output" / "checkpoint-2")
    assert state.boot_id == current_boot_id()
    assert run.read_command()["argv"][-2:] == ["--resume_from_checkpoint", str(run.path / "output" / "checkpoint-2")]
    stop_run(run)


def test_a_run_cut_by_a_reboot_of_this_host_is_found_lost_and_resumes(workspace: Path) -> None:
    """The box crashed or was restarted while the run trained: its state still says running, recorded in an
    earlier boot. Looking concludes it lost (unknown), and resume goes on from its last complete checkpoint."""
    run = h.fake_run(workspace, status="running", checkpoints=(2,),
                     state={"boot_id": "an-earlier-boot", "supervisor_pid": 4242, "supervisor_started": 1.0})
    assert refresh(run).status == "unknown"
    resume_run(run)
    state = run.read_state()
    assert state.attempt == 2 and state.boot_id == current_boot_id()
    assert run.read_command()["argv"][-2:] == ["--resume_from_checkpoint", str(run.path / "output" / "checkpoint-2")]
    stop_run(run)


def test_a_run_of_another_host_is_still_not_resumed_here(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(2,), state={"host": "gpu-node-7"})
    with pytest.raises(RunRefused, match="started on host 'gpu-node-7'.*resume it there"):
        resume_run(run)
    assert run.read_state().attempt == 1


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_a_job_that_cannot_start_leaves_no_job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from backend.jobs import job as jobs
    from backend.jobs.job import JobSpec, list_jobs, start_job

    def no_room(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jobs, "start_detached", no_room)
    spec = JobSpec(kind="infer", description="fake", argv=["true"], cwd=str(tmp_path), output=str(tmp_path / "o"))
    with pytest.raises(OSError, match="No space left on device"):
        start_job(tmp_path / "jobs", spec)
    assert list_jobs(tmp_path / "jobs") == []
    assert list((tmp_path / "jobs").iterdir()) == []
