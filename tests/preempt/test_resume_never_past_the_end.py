"""Resume never trains past a run's end (#34 item 2): a run whose newest complete checkpoint is at its max_steps,
or whose events say it finished while its state says otherwise, is refused by `workbench resume` (hand-made
run folders; the real run with a late signal is tests/preempt/test_signals_at_recorded_pids.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_a_checkpoint_at_max_steps_is_not_resumed(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(5, 12),
                     state={"failure_reason": "saved and stopped on SIGUSR1"})
    h.write_events(run, *({"type": "log", "step": s, "max_steps": 12, "loss": 1.0} for s in range(1, 13)),
                   {"type": "run_end", "step": 12, "max_steps": 12, "status": "stopped",
                    "reason": "saved and stopped on SIGUSR1"})

    result = h.cli("resume", run.run_id, "--detach")

    h.assert_clean_exit(result, (2,))
    assert (f"cannot resume {run.run_id}: checkpoint-12 is at step 12, the run's last (max_steps 12); resuming "
            f"would train past its end. To train more, start a new run from it: workbench resume {run.run_id} "
            "--as-new-run") in " ".join(result.output.split())
    assert (run.read_state().status, run.read_state().attempt) == ("stopped", 1)
    assert "--resume_from_checkpoint" not in run.read_command()["argv"]


def test_a_run_whose_events_say_finished_is_not_resumed_whatever_its_state_says(workspace: Path) -> None:
    run = h.fake_run(workspace, status="failed", checkpoints=(5, 12),
                     state={"failure_reason": "killed by SIGUSR1", "signal": "SIGUSR1"})
    h.write_events(run, {"type": "log", "step": 12, "max_steps": 12, "loss": 1.0},
                   {"type": "run_end", "step": 12, "max_steps": 12, "status": "finished"})

    result = h.cli("resume", run.run_id, "--detach")

    h.assert_clean_exit(result, (2,))
    assert (f"run {run.run_id} finished (finished at step 12 of 12 (run_end, checkpoint-12 complete), although its "
            "state says failed): resuming would train past its end") in " ".join(result.output.split())
    assert [c.name for c in run.checkpoints()] == ["checkpoint-5", "checkpoint-12"]
