"""A screen where nothing changes writes nothing to the terminal (#17): over SSH every repaint is bytes.

The app runs headless; every frame it would write is rendered to the escape sequences a real
terminal receives and counted. Each screen is opened, left to settle, then watched for several
of its own update rounds (the runs list reloads, the monitor polls the run folder): not one byte
may follow. The bench (bench/terminal_traffic.py) measures the same in a real pty, with budgets.
"""

from __future__ import annotations

import time
from pathlib import Path

from run_fixtures import FIXED_NOW, FixedSystem, fixture_run, open_monitor, wait_for
from textual.pilot import Pilot

from backend.rundir import index
from tests.timing import scaled
from tui.app import WorkbenchApp
from tui.screens.runs import RunsScreen
from tui.widgets.metric_plots import MetricPlot

QUIET_SECONDS = 0.6  # many of Textual's refresh rounds (60 per second) and more than one 0.1 s poll


class TerminalBytes:
    """Counts the frames and bytes the app sends to its terminal (headless apps send none: rendered here)."""

    def __init__(self, app: WorkbenchApp) -> None:
        self.frames = 0
        self.bytes = 0
        self.last_frame = time.monotonic()
        display = app._display

        def counting(screen, update) -> None:
            if update is not None:
                self.frames += 1
                self.bytes += len(update.render_segments(app.console).encode())
                self.last_frame = time.monotonic()
            display(screen, update)

        app._display = counting  # type: ignore[method-assign]

    def reset(self) -> None:
        self.frames = self.bytes = 0

    async def until_quiet(self, pilot: Pilot, quiet: float = QUIET_SECONDS, timeout: float = 30.0) -> None:
        """Wait until no frame was written for `quiet` seconds (a window that closes at a fixed time lets
        a late repaint escape the count). A screen that never goes quiet fails the test by its count."""
        began, limit = time.monotonic(), scaled(timeout)
        while time.monotonic() - max(self.last_frame, began) < quiet and time.monotonic() - began < limit:
            await pilot.pause(0.05)


async def watched_rounds(pilot: Pilot, counter: TerminalBytes, rounds, count: int = 4) -> tuple[int, int]:
    """Frames and bytes written while the screen runs `count` more of its update rounds, counted until the
    screen has been quiet for a while after the last round (a repaint that a round caused is counted)."""
    await counter.until_quiet(pilot)
    counter.reset()
    start = rounds()
    await wait_for(pilot, lambda: rounds() >= start + count, what=f"{count} update rounds")
    await counter.until_quiet(pilot)
    return counter.frames, counter.bytes


async def test_runs_list_and_monitor_of_a_finished_run_write_nothing_while_nothing_changes(
        tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")  # a finished fp16 run: every panel has something
    index.register(run.path)
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 36)) as pilot:
        counter = TerminalBytes(app)
        runs = app.screen
        assert isinstance(runs, RunsScreen)
        fast = runs.set_interval(0.1, runs.action_reload)  # many reloads in little time
        await wait_for(pilot, lambda: str(run.path.resolve()) in runs.summaries or str(run.path) in runs.summaries,
                       what="the run in the list")
        assert await watched_rounds(pilot, counter, lambda: runs.loads) == (0, 0)
        fast.stop()

        monitor = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem(),
                                     poll_interval=0.1)
        await wait_for(pilot, lambda: monitor.sample is not None, what="the memory sample")
        frames, written = await watched_rounds(pilot, counter, lambda: monitor.polls, count=10)
        assert (frames, written) == (0, 0)
        # the counter does count: a key that changes the screen writes bytes
        await pilot.press("l")  # logarithmic loss axis: the loss plot changes
        await wait_for(pilot, lambda: counter.bytes > 0, what="the log-axis repaint")


async def test_low_bandwidth_mode_and_the_update_interval_keys(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        assert monitor.poll_interval == 2.0  # the default: one frame every two seconds
        await pilot.press("b")
        await wait_for(pilot, lambda: str(monitor.query_one("#scale-spark").content), what="the sparklines")
        assert [plot.display for plot in monitor.query(MetricPlot)] == [False, False, False]
        # the recorded run's loss scale: 24 logged steps, halved at each overflow, one block per step
        scale = str(monitor.query_one("#scale-spark").content)
        assert len(scale) == 24 and set(scale) <= set("▁▂▃▄▅▆▇█")
        assert str(monitor.query_one("#lr-spark").content).startswith("grad ")
        await pilot.press("b")
        assert [plot.display for plot in monitor.query(MetricPlot)] == [True, True, True]
        await pilot.press("i", "i")
        assert monitor.poll_interval == 10.0
