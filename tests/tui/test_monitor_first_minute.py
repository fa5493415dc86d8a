"""The first minute of a run, said (#35): before its first logged step the monitor's loss panel and
`workbench status` say what the run is doing, phase by phase with the time spent in it: starting swift
(imports), loading the model (the trainer's `phase` event; transformers' weight count), preparing the dataset
(swift's start line; its own Map progress, rows done/total), the first step (`run_begin`).

The run folder is written by hand as a starting run writes it, one phase after another, with a process that
carries the run's marker standing in for its trainer (the status stays `running`)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest
from run_fixtures import REPO, FixedSystem, fixture_run, long_quickstart, open_monitor, wait_for

from backend.rundir.layout import RunFolder
from backend.runs.start import start_run
from backend.runs.stop import stop_run
from tests.faults import helpers as h
from tui.app import WorkbenchApp

ACCELERATE = "The following values were not passed to `accelerate launch` and had defaults used instead:\n"
PLUGIN = "[INFO:swift] Successfully imported external_plugins: ['/x/backend/plugin/workbench_callback.py'].\n"
WEIGHTS = "Loading weights:   0%|          | 0/26 [00:00<?, ?it/s]\rLoading weights:  50%|#####     | 13/26 [00:01<00:01]"
ROWS = "Map (num_proc=1):   0%|          | 0/53 [00:00<?, ? examples/s]\rMap (num_proc=1):  40%|####      | 21/53 [00:00]"


def _event(run: RunFolder, **fields: object) -> None:
    with open(run.events_path, "a", encoding="utf-8") as events:
        events.write(json.dumps({"v": 1, "rank": 0, **fields}) + "\n")


def _log(run: RunFolder, text: str) -> None:
    with open(run.log_path, "a", encoding="utf-8") as log:
        log.write(text)


def _starting_run(isolated_runs: Path, now: float) -> RunFolder:
    run = fixture_run(isolated_runs, "quickstart-short")
    run.events_path.write_text("")
    run.log_path.write_text(ACCELERATE)
    return run


def _summary(monitor: object) -> str:
    return str(monitor.query_one("#loss-summary").content)  # type: ignore[attr-defined]


async def test_the_monitor_of_a_starting_run_says_each_phase_with_its_time(isolated_runs: Path) -> None:
    now = float(int(time.time()))
    run = _starting_run(isolated_runs, now)
    supervisor = h.sleeper(marker=run.path)
    try:
        run.update_state(status="running", started_at=now - 40, ended_at=None, supervisor_pid=supervisor.pid,
                         supervisor_started=h.started(supervisor.pid))
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
            monitor = await open_monitor(pilot, run.path, clock=lambda: now, poll_interval=0.2,
                                         system_monitor=FixedSystem(run.path))

            async def shows(text: str) -> None:
                await wait_for(pilot, lambda: _summary(monitor) == text, what=f"{text!r} (shown: {_summary(monitor)!r})")

            await shows("no logged step yet: starting swift (imports) · 40s (run 40s)")
            _event(run, type="phase", time=now - 30, phase="model")
            _log(run, PLUGIN + WEIGHTS)
            await shows("no logged step yet: loading the model: 13/26 weights · 30s (run 40s)")
            started_main = datetime.fromtimestamp(now - 12).isoformat(sep=" ")
            _log(run, f"\n[INFO:swift] Start time of running main: {started_main}\n{ROWS}")
            await shows("no logged step yet: preparing the dataset: 21/53 rows · 12s (run 40s)")
            _event(run, type="run_begin", time=now - 5, max_steps=318, start_step=0)
            await shows("no logged step yet: first step · 5s (run 40s)")
            _event(run, type="log", time=now, step=1, max_steps=318, loss=6.5, learning_rate=1e-4)
            await wait_for(pilot, lambda: _summary(monitor).startswith("train 6.5 @ 1 · "), what="the first step")
    finally:
        supervisor.kill()


def test_status_of_a_starting_run_says_its_phase(isolated_runs: Path) -> None:
    now = time.time()
    run = _starting_run(isolated_runs, now)
    supervisor = h.sleeper(marker=run.path)
    try:
        run.update_state(status="running", started_at=now - 40, ended_at=None, supervisor_pid=supervisor.pid,
                         supervisor_started=h.started(supervisor.pid))
        _event(run, type="phase", time=now - 30, phase="model")
        _log(run, PLUGIN + WEIGHTS)
        said = h.cli("status", str(run.path)).output
        # the seconds as the command's clock has them: the test's now, or a second or two later
        assert re.search(r"\n  starting: loading the model: 13/26 weights · 3\ds \(run 4\ds\)\n", said), said
        assert json.loads(h.cli("status", str(run.path), "--json").output)["startup"] == {
            "phase": "model", "text": "loading the model: 13/26 weights", "done": 13, "total": 26, "since": now - 30}
    finally:
        supervisor.kill()


@pytest.mark.slow
async def test_a_real_run_whose_model_load_is_slow_shows_it_loading(tiny_model: Path, isolated_runs: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_INJECT_LOAD_DELAY", "600")  # inherited by the run's trainer: it never gets past
    run = start_run(long_quickstart(), base_dir=REPO / "profiles")
    try:
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
            monitor = await open_monitor(pilot, run.path, poll_interval=0.5)
            phases: list[str] = []

            def seen(text: str) -> bool:
                shown = _summary(monitor)
                if shown.startswith("no logged step yet: ") and shown.split(" · ")[0] not in phases:
                    phases.append(shown.split(" · ")[0])
                return shown.startswith(text)

            await wait_for(pilot, lambda: seen("no logged step yet: loading the model · "), timeout=300,
                           what="the model loading on screen")
            assert phases == ["no logged step yet: starting swift (imports)", "no logged step yet: loading the model"]
            assert str(monitor.query_one("#run-status").content) == "running"
    finally:
        stop_run(run)
