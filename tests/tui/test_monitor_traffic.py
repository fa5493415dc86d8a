"""A live run's monitor sends the cells a new step changes, not the screen (#17): over SSH a repaint is bytes.

The run grows by one log line per poll; the frames the app would write are rendered to the bytes a terminal
receives (see test_idle_traffic). A whole 120x36 screen is about 7,000 bytes; a new step moves a few plot
cells, the progress line and the summaries: a few hundred bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from run_fixtures import FixedSystem, fixture_run, open_monitor, wait_for
from test_idle_traffic import TerminalBytes

from tui.app import WorkbenchApp


async def test_each_new_step_of_a_live_run_sends_a_few_hundred_bytes(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")  # 40 steps; it goes on below, one step per poll
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 36)) as pilot:
        counter = TerminalBytes(app)
        monitor = await open_monitor(pilot, run.path, poll_interval=0.2, system_monitor=FixedSystem(run.path))
        await counter.until_quiet(pilot)
        counter.reset()
        for step in range(41, 51):
            with open(run.events_path, "a") as events:
                events.write(json.dumps({"v": 1, "type": "log", "time": 2e9 + step, "rank": 0, "step": step,
                                         "max_steps": 100, "loss": 1 + 1 / step, "learning_rate": 1e-4,
                                         "grad_norm": 1.0 + step % 3 / 10}) + "\n")
            await wait_for(pilot, lambda step=step: f"@ {step}" in str(monitor.query_one("#loss-summary").content),
                           what=f"step {step} on screen")
        await counter.until_quiet(pilot)  # the last step's repaint counts too, however late it comes
        assert counter.frames >= 10  # every step reached the screen
        assert counter.bytes / 10 < 2_000, f"{counter.bytes} bytes for 10 steps: the screen was repainted"


async def test_each_new_alert_after_the_first_sends_a_few_lines(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 36)) as pilot:
        counter = TerminalBytes(app)
        monitor = await open_monitor(pilot, run.path, system_monitor=FixedSystem(run.path))
        panel = monitor.query_one("#alerts")
        sent = []
        for number in range(6):  # a diverging run: the watchdog raises one alert after another
            counter.reset()
            with open(run.path / "alerts.jsonl", "a") as alerts:
                alerts.write(json.dumps({"v": 1, "type": "alert", "kind": "divergence", "step": 10 + number,
                                         "message": f"loss is diverging ({number})", "time": 1.0, "evidence": {},
                                         "action": "alert", "id": f"d{number}"}) + "\n")
            panel.check()
            await wait_for(pilot, lambda number=number: f"loss is diverging ({number})" in str(panel.render()), what="the alert")
            await counter.until_quiet(pilot)
            sent.append(counter.bytes)
        # the first alert opens the panel (the screen is laid out again); the next ones change its lines and the
        # loss plot's marks only. A panel that grew with each alert re-sent the whole screen twice: ~20 KB each.
        assert sent[0] > 5_000 and max(sent[1:]) < 3_000, sent


async def test_the_progress_line_of_a_running_run_sends_nothing_until_its_numbers_change() -> None:
    """Textual's ProgressBar repainted itself every second (for an ETA this line does not show): ~256 B/s
    over SSH while a live run's monitor is open. The bar now changes when a half cell or a percent does."""
    from textual.app import App

    from backend.rundir.layout import RunState
    from backend.series import Throughput
    from tui.widgets.run_progress import RunProgress

    state = RunState(run_id="r", profile_name="p", status="running", created_at=1.0e9, started_at=1.0e9)

    def numbers(step: int) -> Throughput:
        return Throughput(step, 1000, 2.0, 900.0, (1000 - step) / 2.0, step / 1000)

    class OneLine(App[None]):
        def compose(self):  # type: ignore[no-untyped-def]
            yield RunProgress()

    app = OneLine()
    async with app.run_test(size=(120, 3)) as pilot:
        line = app.query_one(RunProgress)
        for step in (380, 390, 400):  # a live run: each poll brings new steps
            line.show(state, numbers(step), now=1.0e9 + 60)
            await pilot.pause(0.2)
        assert "━" in shown_line(app) and " 40% step 400/1000" in shown_line(app)
        counter = TerminalBytes(app)
        await counter.until_quiet(pilot)
        counter.reset()
        await pilot.pause(3.0)  # between two polls (and the clock stands): nothing to send
        assert (counter.frames, counter.bytes) == (0, 0)
        line.show(state, numbers(400), now=1.0e9 + 60)  # a poll that found no new step
        await counter.until_quiet(pilot)
        assert (counter.frames, counter.bytes) == (0, 0)
        line.show(state, numbers(410), now=1.0e9 + 60)  # one percent more: the bar's line changes
        await wait_for(pilot, lambda: counter.frames > 0, what="the new step's frame")
        await counter.until_quiet(pilot)
        assert " 41% step 410/1000" in shown_line(app) and 0 < counter.bytes < 600, counter.bytes


def shown_line(app) -> str:  # type: ignore[no-untyped-def]
    return app.screen._compositor.render_strips()[0].text
