"""Every run measures its memory per phase (#26): the callback writes a `memory_phase` event at each
boundary of the planner's timeline, and `workbench status` puts each phase's measurement beside the
phase's forecast with the error. On CPU the host-RAM side is the real one (RSS at each boundary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.runs.lookup import find_run
from tests.runs.helpers import quick_profile, workbench

pytestmark = pytest.mark.slow


def test_a_cpu_run_records_each_phase_and_status_compares_them(tiny_model: Path, isolated_runs: Path,
                                                               tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, data={"split_dataset_ratio": 0.2},
                            training={"max_steps": 4, "eval_steps": 2, "save_steps": 2, "logging_steps": 1})
    workbench("run", str(profile))
    run = find_run("quickstart-test")
    phases = [e for e in read_all(run.events_path) if e["type"] == "memory_phase" and e["rank"] == 0]
    names = [e["phase"] for e in phases]
    # model loaded; step 1's forward/backward; its optimizer step; steps 2.. until the evaluation at step 2
    assert names[:6] == ["load", "first_step", "optimizer_step", "steady_step", "eval", "save"]
    assert [e["step"] for e in phases[:6]] == [0, 0, 0, 2, 2, 2]
    assert names[-1] == "steady_step" and "eval" in names[6:] and "save" in names[6:]
    assert all(e["rss_bytes"] > 0 and e["cuda"] is None for e in phases)  # CPU: host RSS only
    # the process tree (here the process alone: no data-loader workers) and no NVML reading on CPU
    assert all(e["tree_rss_bytes"] >= e["rss_bytes"] and e["nvml"] is None for e in phases)
    status = json.loads(workbench("status", run.run_id, "--json").stdout)
    rows = {row["phase"]: row for row in status["memory"]["phase_rows"]}
    assert set(rows) == {"load", "first_step", "optimizer_step", "steady_step", "eval", "save"}
    assert all(row["kind"] == "host_rss_bytes" and row["error_percent"] is not None for row in rows.values())
    text = workbench("status", run.run_id).stdout
    assert "per phase (forecast peak:" in text
    assert "  first step, host RSS per process: forecast" in text and "error" in text
