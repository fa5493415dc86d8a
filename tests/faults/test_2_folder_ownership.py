"""Critical 2: `delete` removes only proven run folders, picked by exact id, a unique start of an id
or the folder itself; anything else is refused with the reason and left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import helpers as h


def _decoy(folder: Path) -> Path:
    """What the old `delete` took for a run: any folder with a state.json."""
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"run_id": folder.name, "profile_name": "x", "status": "finished"}))
    (folder / "thesis.tex").write_text("years of work")
    return folder


def test_a_decoy_folder_with_a_fake_state_json_survives_delete(workspace: Path, tmp_path: Path) -> None:
    decoy = _decoy(tmp_path / "my-project")
    result = h.cli("delete", str(decoy), "--yes")
    h.assert_clean_exit(result, (2,))
    assert "is not a workbench run folder (run.json is missing)" in result.output
    assert (decoy / "thesis.tex").read_text() == "years of work"


def test_a_decoy_inside_the_workspace_survives_delete_by_name(workspace: Path) -> None:
    decoy = _decoy(workspace / "20260101-000000-decoy-0000")
    result = h.cli("delete", decoy.name, "--yes")
    h.assert_clean_exit(result, (2,))
    assert "not a workbench run folder" in result.output
    assert (decoy / "thesis.tex").exists()


def test_a_copied_run_folder_is_not_the_run_it_names(workspace: Path, tmp_path: Path) -> None:
    run = h.fake_run(workspace)
    copy = tmp_path / "copy-of-run"
    copy.mkdir()
    for name in ("run.json", "state.json", "command.json"):
        (copy / name).write_bytes((run.path / name).read_bytes())
    result = h.cli("delete", str(copy), "--yes")
    h.assert_clean_exit(result, (2,))
    assert f"run.json names run '{run.run_id}', not this folder" in result.output
    assert copy.is_dir()


@pytest.mark.parametrize("ref, why", [
    ("", "an empty run reference matches no run"),
    ("   ", "an empty run reference matches no run"),
    ("3", "'3' is too short to pick a run"),
    ("0001", "no run id is or starts with '0001'"),  # a part of an id, not its start
    ("2026", "'2026' matches several runs"),
    ("x" * 5000, "a run reference of 5,000 characters matches no run"),
], ids=["empty", "blank", "one-character", "not-a-start", "ambiguous", "5000-characters"])
def test_delete_refuses_empty_short_ambiguous_and_huge_references(workspace: Path, ref: str, why: str) -> None:
    first = h.fake_run(workspace, "20260101-120000-fake-0001")
    second = h.fake_run(workspace, "20260102-120000-fake-0002")
    result = h.cli("delete", ref, "--yes")
    h.assert_clean_exit(result, (2,))
    assert why in result.output
    assert first.path.is_dir() and second.path.is_dir()


def test_delete_takes_an_exact_id_or_a_unique_start_of_one(workspace: Path) -> None:
    first = h.fake_run(workspace, "20260101-120000-fake-0001")
    second = h.fake_run(workspace, "20260102-120000-fake-0002")
    h.assert_clean_exit(h.cli("delete", first.run_id, "--yes"), (0,))
    assert not first.path.exists()
    h.assert_clean_exit(h.cli("delete", "20260102", "--yes"), (0,))
    assert not second.path.exists()


def test_delete_refuses_a_running_run(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    marked = h.sleeper(marker=run.path)
    run.update_state(supervisor_pid=marked.pid, supervisor_started=h.started(marked.pid))
    result = h.cli("delete", run.run_id, "--yes")
    h.assert_clean_exit(result, (2,))
    assert "is running; stop it before deleting" in result.output
    assert run.path.is_dir() and h.alive(marked)
