"""Critical 3: a run writes checkpoints only into an empty folder or its own; a non-empty or another
run's output_dir is a validation error that names what is there (or the run that owns it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.runs.errors import RunRefused
from backend.runs.outputs import claim_output_dir, output_dir_problem
from backend.runs.resume import resume_run
from tests.faults import helpers as h
from tests.runs.helpers import quick_profile


def _profile_into(tmp_path: Path, output_dir: Path) -> Path:
    return quick_profile(tmp_path, output={"output_dir": str(output_dir)})


def test_validate_refuses_an_output_dir_holding_someone_elses_checkpoint(workspace: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "shared-out"
    h.complete_checkpoint(theirs / "checkpoint-1", 1)
    result = h.cli("validate", str(_profile_into(tmp_path, theirs)))
    h.assert_clean_exit(result, (1,))  # validate: 1 = the profile has errors
    assert "[output.output_dir]" in result.output
    assert f"output_dir {theirs} is not empty (checkpoint-1)" in result.output
    assert (theirs / "checkpoint-1" / "trainer_state.json").is_file()


def test_validate_names_the_run_that_owns_the_output_dir(workspace: Path, tmp_path: Path) -> None:
    first = h.fake_run(workspace, "20260101-120000-first-0001")
    shared = tmp_path / "out"
    claim_output_dir(shared, first.path)
    result = h.cli("validate", str(_profile_into(tmp_path, shared)))
    h.assert_clean_exit(result, (1,))
    assert f"holds the checkpoints of run 20260101-120000-first-0001 ({first.path})" in result.output


def test_an_empty_or_new_output_dir_is_fine_and_the_owner_may_write_again(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert output_dir_problem(tmp_path / "empty") is None
    assert output_dir_problem(tmp_path / "new") is None
    claim_output_dir(tmp_path / "new", tmp_path / "run-a")
    assert output_dir_problem(tmp_path / "new", tmp_path / "run-a") is None  # its own (resume)
    assert "run-a" in output_dir_problem(tmp_path / "new", tmp_path / "run-b")


def test_two_claims_of_one_output_dir_one_wins(tmp_path: Path) -> None:
    claim_output_dir(tmp_path / "out", tmp_path / "run-a")
    with pytest.raises(FileExistsError, match="claimed by run"):
        claim_output_dir(tmp_path / "out", tmp_path / "run-b")
    assert json.loads((tmp_path / "out" / ".workbench-owner.json").read_text())["run_id"] == "run-a"


def test_resume_refuses_when_the_output_dir_now_belongs_to_another_run(workspace: Path, tmp_path: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(2,))
    other = h.fake_run(workspace, "20260101-130000-other-0002")
    (run.output_dir / ".workbench-owner.json").write_text(json.dumps({"run": str(other.path)}))
    with pytest.raises(RunRefused, match="now belongs to run 20260101-130000-other-0002"):
        resume_run(run)
