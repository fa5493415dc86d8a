"""One checkpoint verdict for resume, the scoreboard and pins (#34 item 12): trainer_state.json parsed, its
global_step the folder's own step, no symlink leading out of the folder, the run's world size everywhere.
Hand-made run folders through `workbench checkpoints` and `workbench resume`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.runs.stop import stop_run
from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def _rows(run_id: str) -> list[tuple[str, str, str | None]]:
    result = h.cli("checkpoints", run_id, "--json")
    h.assert_clean_exit(result, (0,))
    return [(r["name"], r["status"], r["problem"]) for r in json.loads(result.output)["rows"]]


def test_a_truncated_trainer_state_is_incomplete_everywhere(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(4, 8))
    state = run.path / "output" / "checkpoint-8" / "trainer_state.json"
    state.write_text('{"global_step": 8, "log_history": [{"loss": 1.')  # the disk filled while it was written

    assert _rows(run.run_id) == [
        ("checkpoint-4", "complete", None),
        ("checkpoint-8", "incomplete", "checkpoint-8 its trainer_state.json does not parse (cut off while being "
                                       "saved)")]
    pinned = h.cli("checkpoints", run.run_id, "--pin", "8")
    h.assert_clean_exit(pinned, (2,))
    assert "cannot pin an incomplete checkpoint: checkpoint-8 its trainer_state.json does not parse" in \
        " ".join(pinned.output.split())
    try:
        resumed = h.cli("resume", run.run_id, "--detach")
        h.assert_clean_exit(resumed, (0,))
        assert "skipped checkpoint-8 its trainer_state.json does not parse" in " ".join(resumed.output.split())
        assert run.read_state().resumed_from == str(run.path / "output" / "checkpoint-4")
    finally:
        stop_run(run)


def test_a_planted_checkpoint_of_another_run_with_a_link_out_is_never_resumed(workspace: Path,
                                                                               tmp_path: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(4,))
    planted = h.complete_checkpoint(run.path / "output" / "checkpoint-999999999999", 4)  # another run's step 4
    (tmp_path / "secret.pt").write_bytes(b"\0" * 64)
    (planted / "optimizer.pt").unlink()
    (planted / "optimizer.pt").symlink_to(tmp_path / "secret.pt")

    problem = ("checkpoint-999999999999 lacks optimizer.pt (optimizer state); optimizer.pt is a symlink leading "
               "out of the folder; its trainer_state.json says step 4, not 999999999999 (a checkpoint of another "
               "run, or moved here)")
    assert _rows(run.run_id) == [("checkpoint-4", "complete", None), ("checkpoint-999999999999", "incomplete", problem)]
    try:
        resumed = h.cli("resume", run.run_id, "--detach")
        h.assert_clean_exit(resumed, (0,))
        assert f"skipped {problem}" in " ".join(resumed.output.split())
        assert run.read_state().resumed_from == str(run.path / "output" / "checkpoint-4")
    finally:
        stop_run(run)


def test_the_scoreboard_and_pins_judge_with_the_run_s_world_size_as_resume_does(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(4,))  # rng_state.pth: one process's RNG state
    run.world_path.write_text(json.dumps({"world": {"nnodes": 1, "nproc_per_node": 2, "micro_batch": 1,
                                                    "gradient_accumulation_steps": 1}, "hashes": {}}))
    problem = "checkpoint-4 lacks rng_state_0.pth, rng_state_1.pth (RNG state of ranks 0, 1 of 2)"

    assert _rows(run.run_id) == [("checkpoint-4", "incomplete", problem)]
    pinned = h.cli("checkpoints", run.run_id, "--pin", "4")
    h.assert_clean_exit(pinned, (2,))
    assert f"cannot pin an incomplete checkpoint: {problem}" in " ".join(pinned.output.split())
    resumed = h.cli("resume", run.run_id, "--detach")
    h.assert_clean_exit(resumed, (2,))
    assert f"has no complete checkpoint to resume from ({problem})" in " ".join(resumed.output.split())
