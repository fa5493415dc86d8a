"""The monitor on run folders recorded from real tiny runs: every panel's numbers against the files."""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path

import psutil
from rich.console import Console
from rich.style import Style
from run_fixtures import FIXTURES, fixture_run, open_monitor, plots_drawn, wait_for
from textual.geometry import Region
from textual.widget import Widget

from backend.contract.events import read_all
from tui.app import WorkbenchApp
from tui.widgets.log_tail import LogTail
from tui.widgets.metric_plots import LossPlot, LossScalePlot, LrGradPlot


def app() -> WorkbenchApp:
    return WorkbenchApp(None, start_mode="runs")


def logs_of(name: str) -> list[dict]:
    return [e for e in read_all(FIXTURES / f"{name}.jsonl") if e["type"] == "log"]


def text_of(screen, selector: str) -> str:
    return str(screen.query_one(selector).content)


async def test_loss_lr_progress_and_no_scaler_panel_match_the_file(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    events = read_all(run.events_path)
    logs = [e for e in events if e["type"] == "log"]
    evals = [e for e in events if e["type"] == "eval"]
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        shown = screen.query_one(LossPlot).shown
        assert shown["train"] == ([e["step"] for e in logs], [e["loss"] for e in logs])
        assert shown["evals"] == ([e["step"] for e in evals], [e["metrics"]["eval_loss"] for e in evals])
        assert len(shown["smooth"][0]) == len(logs)
        lowest = min(logs, key=lambda e: e["loss"])
        summary = text_of(screen, "#loss-summary")
        assert f"train {logs[-1]['loss']:.4g} @ {logs[-1]['step']}" in summary
        assert f"min {lowest['loss']:.4g} @ {lowest['step']}" in summary
        assert f"eval {evals[-1]['metrics']['eval_loss']:.4g} @ {evals[-1]['step']}" in summary

        drawn = plot_lines(screen.query_one(LossPlot))  # what the terminal shows
        assert all(name in drawn[2] + drawn[3] + drawn[4] for name in ("train", "EMA", "eval"))  # the legend
        assert x_labels(drawn) == [0, 10, 20, 30, 40]  # the whole run: 40 steps (max_steps of run_begin)
        assert min(y_labels(drawn)) <= lowest["loss"] and max(y_labels(drawn)) >= max(e["loss"] for e in logs)
        drawn = plot_lines(screen.query_one(LrGradPlot))
        assert "lr" in drawn[1] and "grad norm" in drawn[2] and x_labels(drawn) == [0, 10, 20, 30, 40]

        lr = screen.query_one(LrGradPlot).shown
        assert lr["lr"][1] == [e["learning_rate"] for e in logs]
        assert lr["grad"][1] == [e["grad_norm"] for e in logs]
        assert f"grad norm {logs[-1]['grad_norm']:.4g} (max {max(e['grad_norm'] for e in logs):.4g})" in text_of(
            screen, "#lr-summary")

        begin = events[0]
        assert begin["scaler"] is None
        assert text_of(screen, "#scale-summary") == f"no loss scaler: {begin['scaler_reason']}"
        assert screen.query_one("#scale-panel").has_class("-no-scaler")
        assert not screen.query_one(LossScalePlot).display

        state = run.read_state()
        numbers = text_of(screen, "#run-numbers")
        took = int(state.ended_at - state.started_at)  # as recorded in state.json (13 min 3 s on a loaded machine)
        assert "step 40/40" in numbers and f"elapsed {took // 60}m{took % 60:02d}s" in numbers
        assert f"{logs[-1]['tokens_per_second']:.4g} tok/s" in numbers
        assert str(screen.query_one("#run-status").content) == "finished"


async def test_loss_scale_panel_marks_each_overflow_of_the_fp16_run(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    logs = logs_of("cpu-fp16-overflow")
    overflow_steps = [e for prev, e in itertools.pairwise([{"overflow_count": 0}] + logs)
                      if e["overflow_count"] > prev["overflow_count"]]
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        shown = screen.query_one(LossScalePlot).shown
        assert shown["scale"] == ([e["step"] for e in logs], [e["loss_scale"] for e in logs])
        assert shown["overflows"] == ([e["step"] for e in overflow_steps], [e["loss_scale"] for e in overflow_steps])
        assert 8 in shown["overflows"][0]  # the injected overflow
        plot = screen.query_one(LossScalePlot)
        drawn = plot_lines(plot)
        # the file's scales are 65536, 131072 and 262144: a log2 axis labelled by powers of two
        assert [line.split("┤")[0].strip() for line in drawn if "┤" in line] == ["2^18", "2^17", "2^16"]
        assert "scale" in drawn[1] and "overflow" in drawn[2]  # the legend
        red_marks = sum(segment.text.count("x") for strip in plot.render_lines(Region(0, 0, *plot.size))
                        for segment in strip if "overflow" not in strip.text and is_red(segment.style))
        assert red_marks == 2 == logs[-1]["overflow_count"]  # one red x per overflow, as the file counts them
        last = logs[-1]
        assert text_of(screen, "#scale-summary") == (
            f"GradScaler: scale {last['loss_scale']:g} = 2^{int(math.log2(last['loss_scale']))} · "
            f"{last['overflow_count']} overflows · {last['skipped_steps']} skipped steps")
        assert screen.query_one(LossScalePlot).display
        # grad norm is inf at a skipped step: a gap in the plot, not a divergence
        assert "NaN/inf" not in text_of(screen, "#lr-summary")


async def test_a_diverged_run_gets_a_diagnosis(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "diverged-lr")
    first_lost = next(e["step"] for e in logs_of("diverged-lr") if e["grad_norm"] is None)
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        assert f"NaN/inf since step {first_lost}" in text_of(screen, "#lr-summary")
        diagnosis = screen.query_one(LogTail).diagnosis_text
        assert f"became NaN/inf at step {first_lost}" in diagnosis and "lower learning_rate" in diagnosis


async def test_a_failed_run_shows_the_error_lines_and_a_diagnosis(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "broken-data")  # failed while loading its data: no events at all
    log_text = run.log_path.read_text()
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        # the log's last exception, as swift's dataset loader raised it (row 20 of broken.jsonl is not JSON)
        assert screen.query_one(LogTail).diagnosis_text == (
            "✗ datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset"
            " — Read the traceback above this line in the log.")
        assert str(screen.query_one("#run-status").content) == "failed"
        lines = list(screen.feed.log.lines)
        errors = [line.text for line in lines if line.level == "error"]
        assert any(text.startswith("Traceback") for text in errors)
        assert any("DatasetGenerationError" in text for text in errors)
        assert lines[-1].text == log_text.rstrip("\n").split("\n")[-1].split("\r")[-1].rstrip()
        assert text_of(screen, "#scale-summary") == "waiting for the run to begin"


def long_run_events(path: Path) -> None:
    """1,200 steps written by hand, longer than the longest zoom (1000 steps): the loss is 100 up to step
    1000, 10 from 1001 to 1150, then climbs from 1.02 to 2.0 over the last 50 steps (1 + (step - 1150) / 50)."""
    lines = [{"v": 1, "type": "run_begin", "time": 1.0, "rank": 0, "precision": "fp32", "scaler": None,
              "scaler_reason": "fp32 training: no loss scaling", "max_steps": 1200}]
    for step in range(1, 1201):
        loss = 100.0 if step <= 1000 else 10.0 if step <= 1150 else 1.0 + (step - 1150) / 50
        lines.append({"v": 1, "type": "log", "time": 1.0 + step, "rank": 0, "step": step, "max_steps": 1200,
                      "loss": loss, "learning_rate": 1e-4, "grad_norm": 1.0})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def plot_lines(plot: Widget) -> list[str]:
    """The plot as the terminal shows it, line by line."""
    return [strip.text for strip in plot.render_lines(Region(0, 0, *plot.size))]


def y_labels(lines: list[str]) -> list[float]:
    """The numbers left of the y axis, top to bottom."""
    return [float(line.split("┤")[0]) for line in lines if "┤" in line and line.split("┤")[0].strip()]


def is_red(style: Style | None) -> bool:
    if style is None or style.color is None:
        return False
    red, green, blue = style.color.get_truecolor()
    return red > 180 and green < 90 and blue < 130


def x_labels(lines: list[str]) -> list[int]:
    """The step numbers under the x axis, left to right."""
    return [int(word) for word in lines[-1].split()]


async def test_smoothing_log_scale_and_zoom_as_the_user_sees_them(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    long_run_events(run.events_path)
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        plot = screen.query_one(LossPlot)

        async def press(key: str) -> list[str]:
            await pilot.press(key)
            await plots_drawn(pilot, screen)
            return plot_lines(plot)

        lines = plot_lines(plot)
        assert lines[0].strip() == "all steps" and "EMA" in " ".join(lines)  # smoothing is on at first
        assert x_labels(lines)[0] == 0 and 1000 in x_labels(lines)  # the whole run, from step 0
        linear = y_labels(lines)
        assert 0.0 in linear and max(linear) >= 100.0  # a linear axis from 0 up past the plateau at 100

        lines = await press("s")
        assert "EMA" not in " ".join(lines) and "EMA" not in text_of(screen, "#loss-summary")
        lines = await press("s")
        assert "EMA" in " ".join(lines) and "EMA(0.9)" in text_of(screen, "#loss-summary")

        lines = await press("l")
        assert lines[0].strip() == "all steps · log y"
        labels = y_labels(lines)
        assert min(labels) == 1.0 and max(labels) == 100.0  # the lowest loss is 1.02: no 0 on a log axis
        ratios = [high / low for high, low in itertools.pairwise(labels)]
        assert all(abs(r / ratios[0] - 1) < 0.05 for r in ratios)  # evenly spaced labels: a constant ratio
        lines = await press("l")
        assert lines[0].strip() == "all steps" and 0.0 in y_labels(lines)

        await press("s")  # the raw loss alone (the EMA still remembers the plateau for a while)
        # the y axis spans what is in view: the plateau at 100 leaves it at 200 steps, the 10s at 50 steps
        for steps, (top_from, top_below) in ((1000, (100, 1000)), (200, (10, 100)), (50, (2, 10))):
            lines = await press("z")
            assert lines[0].strip() == f"last {steps} steps"
            ticks = x_labels(lines)
            assert ticks[-1] == 1200 and all(1200 - steps < tick <= 1200 for tick in ticks), ticks
            labels = y_labels(lines)
            assert top_from <= max(labels) < top_below and min(labels) <= 1.02, labels
        lines = await press("z")  # back to the whole run
        assert lines[0].strip() == "all steps" and x_labels(lines)[0] == 0


async def test_damaged_event_lines_are_said_and_hide_nothing(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    lines = run.events_path.read_bytes().splitlines(keepends=True)
    # a line torn by a crash and a line of garbage, in the middle of the run
    damaged = lines[:10] + [lines[10][:40] + b"\n", b"\xff\xfe garbage\n"] + lines[10:]
    run.events_path.write_bytes(b"".join(damaged))
    logs = logs_of("quickstart-short")
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        summary = text_of(screen, "#loss-summary")
        assert f"train {logs[-1]['loss']:.4g} @ {logs[-1]['step']}" in summary  # the rest is all there
        assert summary.endswith("· 2 damaged lines skipped")
        assert x_labels(plot_lines(screen.query_one(LossPlot))) == [0, 10, 20, 30, 40]


async def test_small_terminal_shows_one_panel_at_a_time(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    async with app().run_test(size=(80, 24)) as pilot:
        screen = await open_monitor(pilot, run.path)
        visible = lambda: [p.id for p in screen.query(".panel") if p.display]  # noqa: E731
        assert screen.has_class("-compact") and visible() == ["loss-panel"]
        await pilot.press("3")
        assert visible() == ["scale-panel"]
        await pilot.press("p")
        assert visible() == ["memory-panel"]


async def test_memory_panel_samples_this_machine(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        await wait_for(pilot, lambda: screen.sample is not None, what="a memory sample")
        sample = screen.sample
        assert sample.host_total == psutil.virtual_memory().total
        assert sample.run_rss is None  # the recorded run has no process any more
        text = plain(screen.query_one("#memory").content)
        assert f"/ {sample.host_total / 2**30:.1f} GiB" in text
        if sample.gpu_error:
            assert text.count("no NVIDIA GPU") == 1  # said once
        else:
            assert text.count("GPU") >= len(sample.gpus)
        last_rss = logs_of("quickstart-short")[-1]["rss_bytes"]
        assert f"trainer RSS {last_rss / 2**20:.1f} MiB" in text


async def test_memory_panel_compares_the_forecast_with_the_measured_peak(tmp_path: Path, isolated_runs: Path) -> None:
    from backend.contract.event_writer import EventWriter

    run = fixture_run(tmp_path, "quickstart-short")
    # the planner's forecast as stored at launch (Estimate.to_json(), the keys the panel reads), written by hand:
    # 3 GiB per GPU of which 0.5 GiB is the CUDA context, so the caching allocator should peak at 2.5 GiB
    forecast = {"per_device_total_bytes": 3 * 2**30, "host_total_bytes": 8 * 2**30, "request": {"num_gpus": 1},
                "breakdown": {"cuda_context": 2**29, "allocator_overhead": 2**28, "weights": 2**31}}
    run.forecast_path.write_text(json.dumps(forecast))
    # a GPU run's log event carries the allocator's peaks; this one says 2 GiB was reserved
    EventWriter(run.events_path).write("log", step=41, max_steps=41, loss=0.5,
                                       cuda=[{"device": 0, "allocated": 1, "reserved": 1, "max_allocated": 1,
                                              "max_reserved": 2 * 2**30}])
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        await wait_for(pilot, lambda: "peak reserved" in plain(screen.query_one("#memory").content),
                       what="the forecast line")
        text = plain(screen.query_one("#memory").content)
        assert "forecast 3.0 GiB per GPU, 8.0 GiB host" in text
        assert "peak reserved 2.0 GiB vs forecast 2.5 GiB (+25%)" in text  # (2.5 - 2) / 2


def plain(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def test_alert_steps_are_marked_on_the_loss_plot(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    # two alerts of the run's watchdog, written by hand as alerts.jsonl holds them
    (run.path / "alerts.jsonl").write_text(
        '{"v":1,"type":"alert","kind":"loss_scale","message":"3 overflows in a row","step":8,"time":1.0,'
        '"evidence":{},"action":"alert","id":"a1","run_id":""}\n'
        '{"v":1,"type":"alert","kind":"hang","message":"no step for 60 s","step":24,"time":2.0,'
        '"evidence":{},"action":"alert","id":"a2","run_id":""}\n')
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        plot = screen.query_one(LossPlot)
        await wait_for(pilot, lambda: "alerts at steps 8, 24" in plot_lines(plot)[0], what="the alerts in the title")
        strips = plot.render_lines(Region(0, 0, *plot.size))
        red_columns: dict[int, int] = {}
        for strip in strips[2:-2]:  # the plot's rows: not the title, the legend or the x axis
            column = 0
            for segment in strip:
                if is_red(segment.style) and segment.text.strip():
                    for offset, char in enumerate(segment.text):
                        if char.strip():
                            red_columns[column + offset] = red_columns.get(column + offset, 0) + 1
                column += len(segment.text)
        tall = sorted(column for column, rows in red_columns.items() if rows >= len(strips) // 2)
        assert len(tall) == 2 and tall[0] < tall[1], red_columns  # two red vertical lines, step 8 left of 24


async def test_the_open_monitor_lists_its_runs_alerts_without_a_toast(tmp_path: Path, isolated_runs: Path) -> None:
    from backend.rundir import index

    shown, other = fixture_run(tmp_path, "cpu-fp16-overflow"), fixture_run(tmp_path, "quickstart-short")
    for run in (shown, other):
        index.register(run.path)
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, shown.path)
        assert pilot.app.alert_toaster.check() == []
        for run, step, message in ((shown, 12, "3 overflows in a row"), (other, 30, "no step for 60 s")):
            with open(run.path / "alerts.jsonl", "a") as handle:
                handle.write(json.dumps({"v": 1, "type": "alert", "kind": "hang", "message": message, "step": step,
                                         "time": 1.0, "evidence": {}, "action": "alert", "id": f"a{step}"}) + "\n")
        assert len(pilot.app.alert_toaster.check()) == 2
        screen.query_one("#alerts").check()
        await pilot.pause()
        # the other run's alert is a toast; this run's is in its panel only (a toast would repaint the screen twice)
        assert [n.title for n in pilot.app._notifications] == ["quickstart-short: hang at step 30"]
        assert "hang at step 12: 3 overflows in a row" in " ".join(plot_lines(screen.query_one("#alerts")))
