"""README promises of the TUI's keys and options: the runs list's `s` (asks, then stops), the monitor's
`0` `1` `2` `4`, and `workbench --refresh 5 --low-bandwidth`."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from run_fixtures import FIXED_NOW, FixedSystem, fixture_run, open_monitor, wait_for
from textual.widgets import DataTable

from tests.faults import helpers as h
from tests.tui.conftest import shown
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.screens.monitor import MonitorScreen
from tui.screens.runs import RunsScreen
from tui.widgets.metric_plots import MetricPlot


async def test_s_in_the_runs_list_asks_then_stops_the_running_run(isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    supervisor = h.sleeper(marker=run.path)
    try:
        run.update_state(status="running", ended_at=None, supervisor_pid=supervisor.pid,
                         supervisor_started=h.started(supervisor.pid))
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
            screen = pilot.app.screen
            assert isinstance(screen, RunsScreen)
            await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
            table = screen.query_one(DataTable)
            table.move_cursor(row=table.get_row_index(str(run.path)))
            await pilot.press("s")
            assert isinstance(pilot.app.screen, ConfirmModal)
            await pilot.press("escape")  # "no": nothing is signalled
            assert h.alive(supervisor)
            await pilot.press("s")
            await pilot.click("#choice-ok")
            await wait_for(pilot, lambda: any(n.title == f"Stopped {run.run_id}" for n in pilot.app._notifications),
                           what="the stop's report")
            told = next(n.message for n in pilot.app._notifications if n.title == f"Stopped {run.run_id}")
            assert told == "sent SIGINT to 1 process(es) - all exited"
            assert supervisor.wait(5) == -signal.SIGINT
            assert run.read_state().status == "stopped"
            await wait_for(pilot, lambda: "stopped" in str(table.get_row(str(run.path))[1]), what="the row to say so")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()


async def test_s_on_a_finished_run_says_there_is_nothing_to_stop(isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = pilot.app.screen
        await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
        await pilot.press("s")
        assert not isinstance(pilot.app.screen, ConfirmModal)
        assert [n.message for n in pilot.app._notifications] == [f"{run.run_id} is finished; nothing to stop"]


async def test_monitor_keys_0_1_2_4_show_one_panel_or_all(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        visible = lambda: [p.id for p in screen.query(".panel") if p.display]  # noqa: E731
        every = ["loss-panel", "lr-panel", "scale-panel", "memory-panel"]
        assert visible() == every
        for key, alone in (("1", "loss-panel"), ("2", "lr-panel"), ("4", "memory-panel")):
            await pilot.press(key)
            assert visible() == [alone], key
        await pilot.press("0")
        assert visible() == every


def test_refresh_and_low_bandwidth_options_reach_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[dict] = []
    monkeypatch.setattr("tui.app.run_app", lambda **options: started.append(options))
    result = h.cli("--refresh", "5", "--low-bandwidth")
    h.assert_clean_exit(result, (0,))
    assert started and (started[0]["refresh_seconds"], started[0]["low_bandwidth"]) == (5.0, True)


async def test_the_monitor_of_a_refresh_5_low_bandwidth_app_updates_every_5_s_with_sparklines(
        tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    app = WorkbenchApp(None, start_mode="runs", refresh_seconds=5.0, low_bandwidth=True)
    async with app.run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        await wait_for(pilot, lambda: str(monitor.query_one("#scale-spark").content), what="the sparklines")
        assert [plot.display for plot in monitor.query(MetricPlot)] == [False, False, False]
        scale = str(monitor.query_one("#scale-spark").content)
        assert len(scale) == 24 and set(scale) <= set("▁▂▃▄▅▆▇█")


class FakeTimers:
    """The monitor's frame timer on a fake clock: `advance` moves the clock a second at a time and fires
    the timers that are due, so the test sees which second a frame comes in, whatever the machine's pace."""

    def __init__(self, real: Callable[..., object]) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []
        self.real = real  # Textual's own set_interval, for the screen's other timers (its repaint)

    def set_interval(self, interval: float, callback: Callable[[], object], *args: object, **kwargs: object) -> object:
        """MonitorScreen.set_interval's stand-in (a bound method on the class: no screen argument)."""
        if getattr(callback, "__name__", None) != "_tick":
            return self.real(callback.__self__, interval, callback, *args, **kwargs)  # type: ignore[attr-defined]
        timer = FakeTimer(interval, callback, due=self.now + interval)
        self.timers.append(timer)
        return timer

    def advance(self) -> bool:
        """One second on; whether a frame timer fired."""
        self.now += 1.0
        fired = False
        for timer in self.timers:
            if not timer.stopped and self.now >= timer.due:
                timer.due += timer.interval
                timer.callback()
                fired = True
        return fired


@dataclass
class FakeTimer:
    interval: float
    callback: Callable[[], object]
    due: float
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True


async def test_a_refresh_5_monitor_draws_a_new_log_line_5_s_after_the_last_frame(
        tmp_path: Path, isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`workbench --refresh 5`: the cadence observed on a fake clock, by what the screen shows (the log tail),
    not by the interval the screen keeps."""
    clock = FakeTimers(MonitorScreen.set_interval)
    monkeypatch.setattr(MonitorScreen, "set_interval", clock.set_interval)
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    app = WorkbenchApp(None, start_mode="runs", refresh_seconds=5.0)
    async with app.run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        await wait_for(pilot, lambda: "best_model_checkpoint: None" in shown(monitor), what="the log tail")
        with open(run.log_path, "a", encoding="utf-8") as log:
            log.write("a line written after the first frame\n")
        seen_at = None
        while seen_at is None and clock.now < 10:
            if clock.advance():  # a frame: the read runs in a worker; wait for what it draws
                await wait_for(pilot, lambda: "after the first frame" in shown(monitor), what="the new log line")
                seen_at = clock.now
        assert seen_at == 5.0
