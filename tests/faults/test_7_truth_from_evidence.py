"""High 7: the final status comes from the supervisor's record, else from run_end and a complete
checkpoint on disk, else "unknown: lost"; a "finished" run that trained nothing is failed, with why;
an incomplete checkpoint is never reported or resumed."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from backend.contract.alerts import read_alerts
from backend.contract.events import read_all
from backend.core.process_identity import run_marker
from backend.profile import load_profile
from backend.rundir.layout import RunFolder
from backend.runs.resume import resume_run
from backend.runs.start import start_run
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from backend.runs.verdict import judge_exit
from backend.watch.inbox import unseen
from tests.faults import helpers as h
from tests.runs.helpers import quick_profile


def _lost(workspace: Path) -> RunFolder:
    """A run marked running whose supervisor and processes are all gone without a record."""
    return h.fake_run(workspace, status="running", state={"supervisor_pid": 4_000_000, "supervisor_started": 1.0})


def test_run_end_and_a_complete_checkpoint_prove_finished(workspace: Path) -> None:
    run = _lost(workspace)
    h.write_events(run, {"type": "run_begin"}, {"type": "log", "step": 10, "loss": 0.5},
                   {"type": "run_end", "step": 10, "status": "finished"})
    h.complete_checkpoint(run.path / "output" / "checkpoint-10", 10)
    state = refresh(run)
    assert state.status == "finished"
    assert state.failure_reason == ("the supervisor left no record; finished by the evidence: run_end at step 10 "
                                    "and checkpoint-10 complete")
    assert state.exit_code is None  # never an invented exit code


def test_without_evidence_the_status_is_unknown_lost(workspace: Path) -> None:
    run = _lost(workspace)
    h.write_events(run, {"type": "log", "step": 4, "loss": 1.0})
    h.complete_checkpoint(run.path / "output" / "checkpoint-2", 2)
    state = refresh(run)
    assert state.status == "unknown" and state.exit_code is None
    assert state.failure_reason == ("lost: the supervisor and every process of the run are gone without recording "
                                    "how it ended; last step 4; last complete checkpoint checkpoint-2; its end is taken as its last "
                                    "event's time (it ended then or later)")
    # its watchdog died with it: the final alert is written once, by whoever concluded the run
    refresh(run)
    alerts = read_alerts(run.path)
    assert [(a.kind, a.step, a.message) for a in alerts] == [("failed", 4, (
        "ended with status unknown: lost: the supervisor and every process of the run are gone without recording "
        "how it ended; last step 4; last complete checkpoint checkpoint-2; its end is taken as its last event's "
        "time (it ended then or later)"))]
    items, _ = unseen({})
    assert [item.alert["message"] for item in items if item.run_dir.name == run.path.name] == [alerts[0].message]


def test_run_end_with_only_a_readme_in_the_checkpoint_is_not_finished(workspace: Path) -> None:
    run = _lost(workspace)
    h.write_events(run, {"type": "log", "step": 6, "loss": 1.0}, {"type": "run_end", "step": 6, "status": "finished"})
    cut = run.path / "output" / "checkpoint-6"
    cut.mkdir(parents=True)
    (cut / "README.md").write_text("# model card")  # all a full disk let the trainer write
    state = refresh(run)
    assert state.status == "unknown"
    assert "run_end says finished but no complete checkpoint is on disk" in state.failure_reason
    assert "checkpoint-6 lacks weights" in state.failure_reason  # the verdict names what it lacks (#27)
    assert "trainer_state.json (written last: cut off while being saved)" in state.failure_reason
    assert run.complete_checkpoints() == []


def test_a_lost_run_whose_log_names_an_error_failed_with_that_line(workspace: Path) -> None:
    run = _lost(workspace)
    run.log_path.write_text("step 1\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                            "OSError: [Errno 28] No space left on device\n")
    state = refresh(run)
    assert state.status == "failed"
    assert state.failure_reason == ("the disk is full: OSError: [Errno 28] No space left on device "
                                    "(output.log line 4) (the supervisor left no record)")


@pytest.mark.parametrize("events, log, reason", [
    ([], "usage: swift sft [-h] [--model MODEL]\n\noptions:\n  -h, --help  show this help message and exit\n",
     "swift printed its help instead of training (a value starting with '-', such as model.source = '--help', is "
     "read as a flag); nothing was trained"),
    ([{"type": "run_begin"}, {"type": "run_end", "step": 0, "status": "finished"}], "",
     "trained nothing: 0 steps (no training step was logged)"),
    ([{"type": "run_begin"}, {"type": "log", "step": 5, "loss": None, "nonfinite": ["loss", "grad_norm"]}], "",
     "the loss was not a finite number at step 5 (NaN/inf weights); the result is unusable"),
    ([{"type": "run_begin"}] + [{"type": "log", "step": s, "loss": 0.0, "grad_norm": None, "nonfinite": ["grad_norm"]}
                                for s in (1, 2, 3)], "",
     "the gradients were not finite numbers for the last 3 logged steps (up to step 3): the weights are NaN/inf; "
     "the result is unusable"),
    # learning_rate = 1e30 for 12 steps, logged every 5: one non-finite grad norm, at the end, and a loss of 0.0
    ([{"type": "run_begin", "precision": "fp32"}, {"type": "log", "step": 5, "loss": 2.31, "grad_norm": 1.7},
      {"type": "log", "step": 10, "loss": 0.0, "grad_norm": None, "nonfinite": ["grad_norm"]},
      {"type": "run_end", "step": 12, "status": "finished"}], "",
     "the gradient norm was not a finite number at the last logged step 10, and no loss scaler skipped that step: "
     "the weights are NaN/inf (a learning rate far too large?); the result is unusable"),
    # no row had an assistant turn: nothing to learn from the first step
    ([{"type": "run_begin"}] + [{"type": "log", "step": s, "loss": 0.0, "grad_norm": 0.0} for s in (1, 2, 3, 4)], "",
     "trained nothing: the loss and the gradient norm were 0.0 from the first logged step to step 4 (no token of "
     "any row was trained on)"),
])
def test_a_finished_run_that_trained_nothing_is_failed(workspace: Path, events: list, log: str, reason: str) -> None:
    run = h.fake_run(workspace, status="running")
    h.write_events(run, *events)
    run.log_path.write_text(log)
    assert judge_exit(run, 0, stop_requested=False) == ("failed", reason, None)


def test_a_real_finish_stays_finished_and_fp16_skips_are_not_failures(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    h.write_events(run, {"type": "run_begin"}, *[
        {"type": "log", "step": s, "loss": 1.0, "grad_norm": None, "nonfinite": ["grad_norm"], "overflow_count": s}
        for s in (1, 2, 3)])
    assert judge_exit(run, 0, stop_requested=False) == ("finished", None, None)


def test_a_loss_that_reaches_zero_after_training_is_a_finish(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    h.write_events(run, {"type": "run_begin"}, {"type": "log", "step": 1, "loss": 1.2, "grad_norm": 3.0},
                   *[{"type": "log", "step": s, "loss": 0.0, "grad_norm": 0.0} for s in (2, 3)])
    assert judge_exit(run, 0, stop_requested=False) == ("finished", None, None)


def test_resume_takes_the_last_complete_checkpoint(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped", checkpoints=(2,))
    cut = run.path / "output" / "checkpoint-4"
    cut.mkdir()
    (cut / "trainer_state.json").write_text("{}")  # weights never written: the disk was full
    try:
        resume_run(run)
        assert run.read_state().resumed_from == str(run.path / "output" / "checkpoint-2")
        assert run.read_command()["argv"][-2:] == ["--resume_from_checkpoint", str(run.path / "output" / "checkpoint-2")]
    finally:
        stop_run(run)


@pytest.mark.slow
def test_kill_9_of_the_supervisor_while_the_trainer_finishes_is_finished(tiny_model: Path, workspace: Path,
                                                                         tmp_path: Path) -> None:
    profile = load_profile(quick_profile(tmp_path, training={"max_steps": 12, "logging_steps": 2, "save_steps": 12}))
    run = start_run(profile, base_dir=tmp_path)
    try:
        h.wait_until(lambda: any(e["type"] == "log" for e in read_all(run.events_path)), timeout=240,
                     what="the first step")
        supervisor = run.read_state().supervisor_pid
        psutil.Process(supervisor).send_signal(signal.SIGKILL)
        assert refresh(run).status == "running"  # the trainer goes on without its supervisor
        h.wait_until(lambda: run_marker(run.path).processes() == [], timeout=240, what="the trainer to finish")
        state = refresh(run)
        assert state.status == "finished", state.failure_reason
        assert state.failure_reason == ("the supervisor left no record; finished by the evidence: run_end at step 12 "
                                        "and checkpoint-12 complete")
        assert state.exit_code is None
        assert [(a.kind, a.step, a.message) for a in read_alerts(run.path)] == [("finished", 12, (
            "the run's supervisor is gone; the supervisor left no record; finished by the evidence: run_end at "
            "step 12 and checkpoint-12 complete"))]
    finally:
        stop_run(run)
