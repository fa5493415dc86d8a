"""Run folders built from the recorded fixtures (tests/fixtures/events): events, log and state
of real tiny runs, copied into a temporary folder the monitor can read."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.screen import Screen

from backend.hardware.monitor import SystemMonitor, SystemSample
from backend.profile import LaunchProfile, load_profile
from backend.rundir.layout import RunFolder
from tests.timing import scaled, timed_out
from tui.screens.monitor import MonitorScreen
from tui.widgets.metric_plots import MetricPlot

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "events"
# frozen "now" for snapshots: one minute after the newest fixture run ended
FIXED_NOW = 1795951600.0


def fixture_run(tmp_path: Path, name: str) -> RunFolder:
    """A run folder named `name` holding that fixture's events.jsonl, output.log and state.json."""
    folder = tmp_path / name
    folder.mkdir(parents=True)
    events = FIXTURES / f"{name}.jsonl"
    if events.exists():
        shutil.copy(events, folder / "events.jsonl")
    shutil.copy(FIXTURES / f"{name}.output.log", folder / "output.log")
    shutil.copy(FIXTURES / f"{name}.state.json", folder / "state.json")
    shutil.copy(FIXTURES / f"{name}.toml", folder / "profile.toml")
    run = RunFolder(folder)
    run.write_identity()  # a proven run folder (run.json), as the workbench makes them: deletable (#14)
    return run


# the memory panel of snapshots shows this, not the memory of the machine running the tests
FIXED_SAMPLE = SystemSample(time=FIXED_NOW, host_total=64 << 30, host_used=21 << 30, host_available=43 << 30,
                            gpus=(), gpu_error="no NVIDIA GPU / NVML unavailable (snapshot)", run_rss=None)


class FixedSystem(SystemMonitor):
    """A SystemMonitor whose every sample is FIXED_SAMPLE (for snapshots only)."""

    def sample(self) -> SystemSample:
        return FIXED_SAMPLE


async def wait_for(pilot: Pilot, predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Let the app run until `predicate()` is true; fail after `timeout` seconds."""
    limit, start = scaled(timeout), time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit:
            raise timed_out(what or str(predicate), timeout, time.monotonic() - start)
        await pilot.pause(0.05)


async def open_monitor(pilot: Pilot, run_dir: Path, **options: object) -> MonitorScreen:
    """Push the monitor of `run_dir` and wait until it has read the whole folder."""
    screen = MonitorScreen(run_dir, **options)  # type: ignore[arg-type]
    await pilot.app.push_screen(screen)
    await wait_for(pilot, lambda: screen.redraws and screen.feed.state is not None and not screen.feed.has_backlog(),
                   what="the monitor's first read")
    await plots_drawn(pilot, screen)
    return screen


async def plots_drawn(pilot: Pilot, screen: Screen) -> None:
    """Wait until every plot shows its newest figure (they are built in thread workers)."""
    await pilot.pause()
    await wait_for(pilot, lambda: all(plot.up_to_date for plot in screen.query(MetricPlot)), what="the plots")
    await pilot.pause()


def long_quickstart() -> LaunchProfile:
    """The shipped quickstart made long enough to watch (thousands of steps, one log per step); tests stop it."""
    profile = load_profile(REPO / "profiles" / "quickstart.toml")
    profile.training.num_train_epochs = 60.0
    profile.training.logging_steps = 1
    profile.training.save_steps = 100_000
    return profile
