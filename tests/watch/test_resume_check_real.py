"""A resume proves it carried on (#39), on real runs of the tiny model: a clean stop and resume says so once in
the run's log and raises nothing; a resume whose schedule was changed on purpose (the run's profile.toml given a
warm-up and another accumulation, a world change accepted with --allow-world-change) raises `resume_drift` with
the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.contract.alerts import read_alerts
from backend.contract.events import read_all
from backend.profile import LaunchProfile, load_profile, save_profile
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from tests.runs.helpers import first_log_at, log_events, quick_profile, wait_for, workbench

pytestmark = pytest.mark.slow

CHECKED = "[workbench] resume check: the run carried on from step "
SEEN = Path("/tmp/notes/issue-39-resume-check.txt")  # what the user met, for the closing note (best effort)


def _record(text: str) -> None:
    try:
        with open(SEEN, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError:
        pass


def _begins(run: RunFolder) -> int:
    return sum(1 for e in read_all(run.events_path) if e["type"] == "run_begin")


def _stop_after(run: RunFolder, step: int) -> None:
    wait_for(first_log_at(run, step), timeout=240, what=f"step {step}")
    workbench("stop", run.run_id)


def _resume(run: RunFolder, *flags: str) -> None:
    begins = _begins(run)
    workbench("resume", run.run_id, "--detach", *flags)
    wait_for(lambda: _begins(run) == begins + 1, timeout=240, what="the resumed attempt's run_begin")


def test_a_clean_resume_says_so_and_a_changed_schedule_raises_drift(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": 100_000, "num_train_epochs": 1000.0, "save_steps": 10,
                                                "logging_steps": 1, "warmup_ratio": 0.0,
                                                "lr_scheduler_type": "constant_with_warmup"},
                            watch={"poll_seconds": 0.5, "actions": {"throughput": "off"}})
    result = workbench("run", str(profile), "--detach")
    run = find_run(result.stdout.strip().splitlines()[-1])
    _stop_after(run, 14)

    _resume(run)  # clean: the same profile
    last = max(e["step"] for e in log_events(run))
    wait_for(lambda: CHECKED in run.log_path.read_text(errors="replace"), timeout=120, what="the resume check line")
    log = run.log_path.read_text(errors="replace")
    assert log.count(CHECKED) == 1
    _record(next(line for line in log.splitlines() if CHECKED in line))
    assert not [a for a in read_alerts(run.path) if a.kind == "resume_drift"]
    _stop_after(run, last + 8)

    # the schedule changed on purpose: a warm-up of half of 100,000 steps, and another accumulation (a world change)
    data = load_profile(run.profile_path).model_dump()
    data["training"].update(warmup_ratio=0.5, gradient_accumulation_steps=2)
    save_profile(LaunchProfile.model_validate(data), run.profile_path)
    _resume(run, "--allow-world-change")
    drift = wait_for(lambda: next((a for a in read_alerts(run.path) if a.kind == "resume_drift"), None),
                     timeout=120, what="the resume_drift alert")
    _record(f"resume_drift alert: {drift.message}")
    assert "back at warm-up" in drift.message, drift.message
    assert drift.evidence["lr_after"] < 0.5 * drift.evidence["lr_expected"]
    assert drift.message.startswith(f"after the resume from step {drift.evidence['start_step']}: learning rate ")
    workbench("stop", run.run_id)
