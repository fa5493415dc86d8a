"""The monitor on run folders recorded from real tiny runs: every panel's numbers against the files."""

from __future__ import annotations

import json

import io
import math
from pathlib import Path

import psutil
from rich.console import Console
from run_fixtures import FIXTURES, fixture_run, open_monitor, wait_for

from backend.events import read_all
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
    overflow_steps = [e for prev, e in zip([{"overflow_count": 0}] + logs, logs)
                      if e["overflow_count"] > prev["overflow_count"]]
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        shown = screen.query_one(LossScalePlot).shown
        assert shown["scale"] == ([e["step"] for e in logs], [e["loss_scale"] for e in logs])
        assert shown["overflows"] == ([e["step"] for e in overflow_steps], [e["loss_scale"] for e in overflow_steps])
        assert 8 in shown["overflows"][0]  # the injected overflow
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


async def test_smoothing_log_scale_and_zoom(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    logs = logs_of("quickstart-short")
    async with app().run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        plot = screen.query_one(LossPlot)
        await pilot.press("s")
        assert plot.shown["smooth"] is None and "EMA" not in text_of(screen, "#loss-summary")
        await pilot.press("s", "l")
        assert screen.log_scale and plot.log_scale
        assert plot.shown["smooth"] is not None
        screen.zoom = 10
        await pilot.pause()
        assert plot.shown["train"][0] == [e["step"] for e in logs if e["step"] > logs[-1]["step"] - 10]
        await pilot.press("z")  # cycles back to the whole run
        assert screen.zoom is None and len(plot.shown["train"][0]) == len(logs)


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
    from backend.events import EventWriter

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
