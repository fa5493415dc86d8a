"""The monitor opened from a run's events summary (backend/series/summary.py) shows what the whole
file shows, and a summary of a file rewritten since is not believed (#16)."""

from __future__ import annotations

import math
from pathlib import Path

from run_fixtures import fixture_run, open_monitor, wait_for

from backend.contract.events import read_all
from backend.series.summary import SummaryKeeper
from tests.tui.conftest import drawn_lines
from tui.app import WorkbenchApp
from tui.widgets.metric_plots import LossPlot, LossScalePlot


def summarise_first_half(events: Path) -> int:
    """Leave the run's summary as its supervisor would have when the file was half written."""
    data = events.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    with open(events, "r+b") as handle:
        handle.truncate(cut)
    SummaryKeeper(events).catch_up(final=True)
    with open(events, "ab") as handle:
        handle.write(data[cut:])
    return cut


async def test_the_monitor_opened_from_a_summary_shows_what_the_file_shows(tmp_path: Path,
                                                                           isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    cut = summarise_first_half(run.events_path)
    logs = [e for e in read_all(run.events_path) if e["type"] == "log"]
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        assert screen.feed.start == f"summary of the first {cut:,} bytes"
        assert screen.query_one(LossPlot).shown["train"] == ([e["step"] for e in logs], [e["loss"] for e in logs])
        scale = screen.query_one(LossScalePlot)
        assert scale.shown["overflows"][0] == [8, 20]  # as the file has them
        await wait_for(pilot, lambda: "⢕⢕ scale" in "".join(drawn_lines(scale)), what="the drawn scale panel")
        drawn = drawn_lines(scale)  # on the screen: a red x at each overflow, and the legend naming them
        assert any("┤ xx overflow " in row for row in drawn)
        assert sum(line.count("x") for line in drawn if "overflow" not in line) == 2  # steps 8 and 20
        last = logs[-1]
        assert str(screen.query_one("#scale-summary").content) == (
            f"GradScaler: scale {last['loss_scale']:g} = 2^{int(math.log2(last['loss_scale']))} · "
            "2 overflows · 2 skipped steps")


async def test_a_summary_of_a_file_rewritten_since_is_not_believed(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    summarise_first_half(run.events_path)
    data = run.events_path.read_bytes()
    with open(run.events_path, "r+b") as handle:  # the same file, the same size: the run_begin line edited
        handle.seek(data.index(b'"GradScaler"') + 1)
        handle.write(b"AnotherOne")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        assert screen.feed.start == "no summary used (events.jsonl was rewritten since)"
        assert str(screen.query_one("#scale-summary").content).startswith("AnotherOne: scale ")


async def test_an_ended_run_without_a_summary_gets_one_from_its_first_open(tmp_path: Path, isolated_runs: Path,
                                                                            monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run made before summaries (no supervisor left to keep one) is read whole once, then opens fast."""
    import tui.feed

    monkeypatch.setattr(tui.feed, "SAVE_EVERY_BYTES", 1000)  # the fixture's 5 KB count as a long run
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    size = run.events_path.stat().st_size
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        first = await open_monitor(pilot, run.path)
        assert first.feed.start == "no summary used (none)"
        app_screen_text = str(first.query_one("#scale-summary").content)
        pilot.app.pop_screen()
        second = await open_monitor(pilot, run.path)
        assert second.feed.start == f"summary of the first {size:,} bytes"
        assert str(second.query_one("#scale-summary").content) == app_screen_text
        assert app_screen_text.endswith("2 overflows · 2 skipped steps")


async def test_a_folder_that_is_not_a_proven_run_gets_no_summary(tmp_path: Path, isolated_runs: Path,
                                                                 monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tui.feed

    monkeypatch.setattr(tui.feed, "SAVE_EVERY_BYTES", 1000)
    run = fixture_run(tmp_path, "cpu-fp16-overflow")
    run.identity_path.unlink()  # no run.json: a folder the workbench cannot prove it made
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        await open_monitor(pilot, run.path)
    assert not (run.path / "events.summary.npz").exists()
