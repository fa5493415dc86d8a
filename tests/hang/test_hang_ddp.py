"""A real 2-process CPU DDP run (gloo) whose rank 1 sleeps inside step 6 (the fault hook
WORKBENCH_INJECT_HANG=1:6:SECONDS): the hang alert names rank 1, both ranks' stacks are grouped in the
report written into the run folder, the monitor's alerts panel shows it, and the webhook gets the summary,
not the dump."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from backend.contract.alerts import Alert, read_alerts
from backend.runs.lookup import find_run
from tests.runs.helpers import quick_profile, wait_for, workbench
from tests.watch.test_watchdog_runs import Hook
from tui.widgets.alerts_panel import AlertsPanel

pytestmark = pytest.mark.slow


class PanelApp(App[None]):
    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder

    def compose(self) -> ComposeResult:
        yield AlertsPanel(self.folder, bell=False, poll_seconds=60, id="alerts")


def _hang(run_dir: Path) -> Alert | None:
    return next((a for a in read_alerts(run_dir) if a.kind == "hang"), None)


async def test_rank_1_sleeping_in_its_step_is_named_with_both_stacks(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_INJECT_HANG", "1:6:600")  # inherited by the run's processes
    hook = Hook()
    try:
        profile = quick_profile(
            tmp_path, "cpu-ddp-2proc",
            training={"max_steps": 40, "logging_steps": 1, "save_steps": 1000, "eval_steps": 1000},
            watch={"hang_factor": 3.0, "hang_min_seconds": 8.0, "poll_seconds": 0.5, "stop_grace_seconds": 3.0,
                   "actions": {"hang": "stop", "throughput": "off"}},
            notify={"webhook": hook.url, "webhook_format": "json", "kinds": ["hang"]})
        result = workbench("run", str(profile), "--detach")
        run = find_run(result.stdout.strip().splitlines()[-1])
        hang = wait_for(lambda: _hang(run.path), timeout=240, what="the hang alert")
        assert hang.evidence["lagging_ranks"] == [1], hang.evidence
        assert "Lagging: rank 1, not in a collective while rank 0 waits in one." in hang.message
        assert "rank 1 is in injected_hang (backend/plugin/fault_hooks.py:" in hang.message
        places = {r["rank"]: (r["place"], r["waiting"]) for r in hang.evidence["ranks"]}
        assert places == {0: ("in step 6", True), 1: ("in step 6", False)}
        report = (run.path / "watch" / "hang-report.txt").read_text()
        assert hang.evidence["report"] == str(run.path / "watch" / "hang-report.txt")
        assert "--- rank 0 (pid " in report and "--- rank 1 (pid " in report
        rank1 = report.split("--- rank 1 (pid ")[1]
        assert "in injected_hang" in rank1 and "in hanging_loss" in rank1
        rank0 = report.split("--- rank 0 (pid ")[1].split("--- rank 1")[0]
        assert "in _distributed_broadcast_coalesced" in rank0  # DDP's buffer broadcast before the forward
        assert "rank 0 waits in _distributed_broadcast_coalesced (torch/nn/parallel/distributed.py:" in hang.message
        flight = "\n".join(hang.evidence["flight_recorder"])
        assert "rank 1 never issued it; rank 0 did and waits in it" in flight, flight
        # the monitor's alerts panel, rendered
        app = PanelApp(run.path)
        async with app.run_test() as pilot:
            await pilot.pause()
            shown = str(app.query_one(AlertsPanel).render())
        assert "hang at step 5: no progress for" in shown and "Lagging: rank 1" in shown
        # the webhook: the summary, not the dump
        body = wait_for(lambda: next((b for b in hook.bodies if b["kind"] == "hang"), None), timeout=30,
                        what="the webhook's hang alert")
        assert body["evidence"]["summary"] == hang.evidence["summary"]
        assert "stacks" not in body["evidence"] and "Lagging: rank 1" in body["line"]
        wait_for(lambda: run.read_state().status in ("stopped", "failed"), timeout=120, what="the run's end")
    finally:
        hook.close()
