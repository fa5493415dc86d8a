"""The monitor of a finished run as a new user meets it at 120x36 and 80x24 (#41): the run's end said once
in one line (the loss plot keeps its rows), swift's metric dicts wrapped whole, accelerate's tab laid out
(never a literal `\\t`), every key of the footer whole, and the learning-rate axis labelled alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.app import App

from tests.tui.run_fixtures import fixture_run, open_monitor
from tui.app import WorkbenchApp
from tui.widgets.metric_plots import LossPlot, LrGradPlot

SWIFT_DICT = ("{'loss': 1.23456789, 'grad_norm': 0.98765432, 'learning_rate': 0.0001, 'token_acc': 0.5, 'epoch': 3.0, "
              "'global_step/max_steps': '318/318', 'percentage': '100.00%', 'elapsed_time': '1m 2s', "
              "'remaining_time': '0s'}")
ACCELERATE = "\t`--num_cpu_threads_per_process` was set to `2` to improve out-of-box performance"


def screen_lines(app: App[None]) -> list[str]:
    """The terminal's rows as the app draws them."""
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_a_finished_runs_monitor_says_its_end_once_and_shows_whole_lines(
        tmp_path: Path, isolated_runs: Path, size: tuple[int, int]) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    with open(run.path / "output.log", "a") as log:
        log.write(ACCELERATE + "\n" + SWIFT_DICT + "\n")
    (run.path / "alerts.jsonl").write_text(json.dumps(
        {"v": 1, "type": "alert", "kind": "finished", "message": "finished at step 318 in 1m 2s", "step": 318,
         "time": 1.0, "evidence": {}, "action": "alert", "id": "f1", "run_id": ""}) + "\n")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=size) as pilot:
        screen = await open_monitor(pilot, run.path)
        await pilot.pause()
        lines = screen_lines(pilot.app)
        text = "\n".join(lines)
        assert text.count("finished at step 318") == 1, text
        assert screen.query_one("#alerts").size.height == 1
        assert screen.query_one(LossPlot).size.height >= (7 if size == (120, 36) else 10)
        # the dict wrapped at spaces, nothing cut at the pane's edge
        assert " ".join(" ".join(lines).split()).count(SWIFT_DICT) == 1, text
        accelerate = next(line for line in lines if "--num_cpu_threads_per_process" in line)
        assert "\\t" not in accelerate and accelerate.startswith(" " * 9 + "`--num_cpu")  # the margin, then a tab, accelerate
        footer = lines[-1]
        for key in ("esc Back", "x Stop", "w Save", "m Merge", "t Chat", "c Checkpoints", "^q Quit", "f2 Workspace",
                    "f3 Runs"):
            assert key in footer, footer


async def test_the_learning_rate_axis_has_even_ticks_labelled_alike(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")  # lr from 0.003 down to 0
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(120, 36)) as pilot:
        screen = await open_monitor(pilot, run.path)
        plot = screen.query_one(LrGradPlot)
        rows = [strip.text for strip in plot.render_lines(plot.region.reset_offset)]
        labels = [row.split("┤")[0].strip() for row in rows if "┤" in row]
        assert labels == ["0.003", "0.002", "0.001", "0.000"]
