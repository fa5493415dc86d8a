"""A real run that learns nothing does not end "finished" (#29 Medium 11): learning_rate = 1e30 for 12
steps turns the weights to NaN/inf, and the run is failed with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import LaunchProfile, load_profile
from backend.runs.start import start_run
from backend.runs.status import refresh
from tests.timing import wait_until

pytestmark = pytest.mark.slow


def test_a_learning_rate_of_1e30_ends_failed_not_finished(tiny_model: Path, isolated_runs: Path) -> None:
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["training"].update({"max_steps": 12, "learning_rate": 1e30, "save_steps": 12, "logging_steps": 5})
    run = start_run(LaunchProfile.model_validate(data), base_dir=SHIPPED_PROFILES_DIR, workspace=isolated_runs)
    wait_until(lambda: not refresh(run).is_active, 600, "the run's end", interval=0.5, detail=lambda: run.log_tail(3000))
    state = run.read_state()
    logs = [e for e in read_all(run.events_path) if e["type"] == "log" and e["rank"] == 0]
    assert state.status == "failed", (state.failure_reason, logs)
    assert state.failure_reason.startswith("the gradient norm was not a finite number at the last logged step"), \
        (state.failure_reason, logs)
