"""A real run that learns nothing does not end "finished" (#29 Medium 11): a NaN loss at each of its 12 steps turns
the weights to NaN, and the run is failed with the reason. (It was learning_rate = 1e30, which validate now refuses
before launch, #35: the debug section's NaN loss gives the same run.)"""

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


def test_a_run_whose_weights_turn_nan_ends_failed_not_finished(tiny_model: Path, isolated_runs: Path) -> None:
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["training"].update({"max_steps": 12, "save_steps": 12, "logging_steps": 5})
    data["debug"] = {**data.get("debug", {}), "inject_nan_steps": list(range(1, 13))}
    run = start_run(LaunchProfile.model_validate(data), base_dir=SHIPPED_PROFILES_DIR, workspace=isolated_runs)
    wait_until(lambda: not refresh(run).is_active, 600, "the run's end", interval=0.5, detail=lambda: run.log_tail(3000))
    state = run.read_state()
    logs = [e for e in read_all(run.events_path) if e["type"] == "log" and e["rank"] == 0]
    assert state.status == "failed", (state.failure_reason, logs)
    assert state.failure_reason.startswith("the gradients were not finite numbers for the last 3 logged steps "
                                           "(up to step 10): the weights are NaN/inf"), (state.failure_reason, logs)
