"""High 8: each case that used to end in a traceback is a clear error naming what is wrong."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from backend.profile import load_profile
from backend.runs import start
from backend.runs.delete import delete_run
from backend.runs.errors import LaunchRefused, RunRefused
from backend.runs.resume import resume_run
from backend.runs.start import start_run
from backend.runs.stop import stop_run
from tests.faults import helpers as h
from tests.runs.helpers import quick_profile


def test_a_300_character_profile_name(workspace: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path)
    profile.write_text(profile.read_text().replace('name = "quickstart-test"', f'name = "{"n" * 300}"'))
    checked = h.cli("validate", str(profile))
    h.assert_clean_exit(checked, (1,))
    assert "[name] the name is 300 characters long (at most 100)" in checked.output
    h.assert_clean_exit(h.cli("show", str(profile)), (0, 1))


@pytest.mark.parametrize("nested", ["x = " + "[" * 5000 + "]" * 5000, "x = " + "{a = " * 400 + "1" + "}" * 400],
                         ids=["arrays-5000-deep", "inline-tables-400-deep"])
def test_deeply_nested_toml(workspace: Path, tmp_path: Path, nested: str) -> None:
    profile = tmp_path / "deep.toml"
    profile.write_text(f'name = "deep"\n{nested}\n')
    for command in ("validate", "show", "run"):
        result = h.cli(command, str(profile))
        h.assert_clean_exit(result, (2,))
        assert f"{profile}: values nested too deeply to read" in result.output


def test_a_full_disk_at_launch_is_refused_with_the_figures_and_leaves_no_folder(
        tiny_model: Path, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile(quick_profile(tmp_path))
    monkeypatch.setattr(start, "_free_bytes", lambda path: 1024)
    with pytest.raises(LaunchRefused) as refused:
        start_run(profile, base_dir=tmp_path)
    message = str(refused.value)
    assert "[output.output_dir] 1.0 KiB free on the disk of" in message
    assert "the first checkpoint needs about" in message and "KiB" in message
    assert list(workspace.iterdir()) == []  # no half-made run folder


def test_no_space_while_writing_the_run_folder_leaves_nothing(
        tiny_model: Path, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile(quick_profile(tmp_path))

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(start, "write_run_files", full)
    with pytest.raises(LaunchRefused, match="No space left on device"):
        start_run(profile, base_dir=tmp_path)
    assert list(workspace.iterdir()) == []


def test_a_run_folder_that_cannot_be_written(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(2,))
    (run.path / ".control.lock").mkdir()  # as a read-only folder would: the lock file cannot be opened
    for command in ("stop", "resume", "delete"):
        result = h.cli(command, run.run_id, *(["--yes"] if command == "delete" else []))
        h.assert_clean_exit(result)
    assert "the folder is not writable" in h.cli("resume", run.run_id).output
    with pytest.raises(RunRefused, match=f"not deleted: cannot delete {run.path}: the folder is not writable"):
        delete_run(run)
    assert run.path.is_dir()


@pytest.mark.parametrize("command", ["status", "stop", "resume", "logs", "delete"])
def test_a_5000_character_run_reference(workspace: Path, command: str) -> None:
    result = h.cli(command, "r" * 5000)
    h.assert_clean_exit(result, (2,))
    assert "a run reference of 5,000 characters matches no run" in result.output


def test_resume_with_a_missing_command_json(workspace: Path) -> None:
    run = h.fake_run(workspace, status="failed", checkpoints=(2,))
    run.command_path.unlink()
    with pytest.raises(RunRefused, match="command.json is missing, so the run's command is unknown"):
        resume_run(run)
    assert run.read_state().status == "failed"
    stop_run(run)
