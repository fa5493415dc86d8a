"""#26: the monitor's memory panel shows, per phase of the timeline the run has measured, what was
measured beside the forecast and the forecast's error (memory_phase events reach it through the store)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from run_fixtures import fixture_run, open_monitor, wait_for

from backend.contract.event_writer import EventWriter
from tui.app import WorkbenchApp

GIB = 2**30


def plain(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def test_the_panel_shows_each_measured_phase_against_its_forecast(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    # the stored forecast, by hand: a CPU run's host RAM per phase (steady steps are held to the larger of
    # the steady and optimizer phases: 10 GiB)
    forecast = {"per_device_total_bytes": 3 * GIB, "host_total_bytes": 10 * GIB, "request": {"num_gpus": 1},
                "breakdown": {"cuda_context": 0, "allocator_overhead": 0}, "peak_phase": "steady_step",
                "timeline": [{"phase": phase, "gpu_total_bytes": 0, "gpu_terms": {}, "host_total_bytes": host * GIB}
                             for phase, host in (("first_step", 8), ("optimizer_step", 8), ("steady_step", 10))]}
    run.forecast_path.write_text(json.dumps(forecast))
    writer = EventWriter(run.events_path)
    writer.write("memory_phase", phase="first_step", step=0, rss_bytes=4 * GIB, tree_rss_bytes=10 * GIB)
    writer.write("memory_phase", phase="steady_step", step=2, rss_bytes=5 * GIB)
    writer.write("memory_phase", phase="steady_step", step=4, rss_bytes=4 * GIB)  # a recurrence: the larger holds
    writer.close()
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        await wait_for(pilot, lambda: "steady step" in plain(screen.query_one("#memory").content),
                       what="the per-phase lines")
        lines = [line.strip() for line in plain(screen.query_one("#memory").content).splitlines()]
        assert "phase       host RSS forecast error" in lines
        assert "first step  10.0 GiB 8.0 GiB  -20%" in lines  # the process tree's 10 GiB, not the process's 4
        assert "steady step 5.0 GiB  10.0 GiB +100%" in lines
