"""The runs list on recorded run folders: columns, open, compare, delete with confirmation, resume refused."""

from __future__ import annotations

import json
from pathlib import Path

from run_fixtures import fixture_run, wait_for
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import DataTable

from backend.contract.events import read_all
from backend.rundir.layout import RunFolder
from tests.tui.conftest import drawn_lines
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.screens.compare import CompareScreen
from tui.screens.monitor import MonitorScreen
from tui.screens.runs import KEEP_GOING, RunsScreen
from tui.widgets.metric_plots import CompareLossPlot

NAMES = ("quickstart-short", "cpu-fp16-overflow", "broken-data")


def workspace_with_fixtures(workspace: Path) -> dict[str, RunFolder]:
    return {name: fixture_run(workspace, name) for name in NAMES}


async def runs_screen(pilot) -> RunsScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RunsScreen)
    await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
    await pilot.pause()
    return screen


def row_of(table: DataTable, run: RunFolder) -> list[str]:
    return [str(cell) for cell in table.get_row(str(run.path))]


async def move_to(pilot, table: DataTable, run: RunFolder) -> None:
    table.move_cursor(row=table.get_row_index(str(run.path)))
    await pilot.pause()


async def test_every_run_is_listed_with_its_numbers(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        table = screen.query_one(DataTable)
        assert table.row_count == len(NAMES)
        logs = [e for e in read_all(runs["quickstart-short"].events_path) if e["type"] == "log"]
        row = row_of(table, runs["quickstart-short"])
        assert row[1:5] == ["finished", "quickstart-short", "fixture-plain", "40/40"]
        assert row[5] == f"{logs[-1]['loss']:.4g}"
        failed = row_of(table, runs["broken-data"])
        assert "failed" in failed[1] and failed[4] == "-"
        assert str(screen.query_one("#runs-note").content) == KEEP_GOING
        assert "never stops" in KEEP_GOING and "close the app" in screen.sub_title


async def test_open_shows_the_monitor_of_the_run(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        table = screen.query_one(DataTable)
        await move_to(pilot, table, runs["cpu-fp16-overflow"])
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, MonitorScreen), what="the monitor")
        assert pilot.app.screen.feed.run.path == runs["cpu-fp16-overflow"].path
        await pilot.press("escape")
        assert pilot.app.screen is screen


async def test_compare_overlays_the_loss_of_marked_runs(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        table = screen.query_one(DataTable)
        await pilot.press("c")  # nothing marked: refused with a hint
        assert not isinstance(pilot.app.screen, CompareScreen)
        for name in ("quickstart-short", "cpu-fp16-overflow"):
            await move_to(pilot, table, runs[name])
            await pilot.press("space")
        assert row_of(table, runs["cpu-fp16-overflow"])[0] == "●"
        await pilot.press("c")
        compare = pilot.app.screen
        assert isinstance(compare, CompareScreen)
        await wait_for(pilot, lambda: len(compare.stores) == 2, what="both runs' events")
        await pilot.press("s")  # raw loss instead of the EMA
        plot = compare.query_one(CompareLossPlot)
        for name in ("quickstart-short", "cpu-fp16-overflow"):
            logs = [e for e in read_all(runs[name].events_path) if e["type"] == "log"]
            assert plot.shown[name] == ([e["step"] for e in logs], [e["loss"] for e in logs])
        # and on the screen: a legend line per run, and a curve of its own colour for each
        await wait_for(pilot, lambda: "quickstart-short" in "".join(drawn_lines(plot)), what="the drawn plot")
        legend = [line.split("┤")[-1].strip(" │") for line in drawn_lines(plot) if "⢕⢕" in line]
        assert legend == ["⢕⢕ quickstart-short", "⢕⢕ cpu-fp16-overflow"]
        assert len(curve_colours(plot)) == 2


def curve_colours(widget: Widget) -> set[str]:
    """The colours of the braille cells a plot draws (its curves and their legend marks)."""
    lines = widget.render_lines(Region(0, 0, *widget.outer_size))
    return {str(segment.style.color.name) for line in lines for segment in line
            if segment.style and segment.style.color and any("\u2801" <= c <= "\u28ff" for c in segment.text)}


async def test_delete_asks_first_and_cancel_keeps_the_run(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    target = runs["broken-data"]
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        table = screen.query_one(DataTable)
        await move_to(pilot, table, target)
        await pilot.press("d")
        assert isinstance(pilot.app.screen, ConfirmModal)
        await pilot.press("escape")
        assert target.path.exists()
        await pilot.press("d")
        await pilot.click("#choice-ok")
        await wait_for(pilot, lambda: not target.path.exists(), what="the folder to go")
        await wait_for(pilot, lambda: str(target.path) not in screen.summaries, what="the list to drop it")
        assert table.row_count == len(NAMES) - 1


async def test_resume_without_checkpoint_is_refused_with_the_reason(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        await move_to(pilot, screen.query_one(DataTable), runs["broken-data"])
        await pilot.press("r")
        await pilot.press("y")
        await wait_for(pilot, lambda: any("checkpoint to resume" in n.message for n in pilot.app._notifications),
                       what="the refusal")
        assert runs["broken-data"].read_state().status == "failed"


async def test_resume_asks_first_naming_the_run(isolated_runs: Path) -> None:
    runs = workspace_with_fixtures(isolated_runs)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        await move_to(pilot, screen.query_one(DataTable), runs["broken-data"])
        await pilot.press("r")
        dialog = pilot.app.screen
        assert isinstance(dialog, ConfirmModal)
        assert dialog.body == ("Resume broken-data (profile fixture-broken-data, failed) from its last complete checkpoint? "
                               "It starts training again.")
        await pilot.press("escape")
        await pilot.pause()
        assert pilot.app.screen is screen
        assert not pilot.app._notifications  # nothing was tried
        assert runs["broken-data"].read_state().status == "failed"


async def test_a_long_profile_name_is_cut_to_its_column(isolated_runs: Path) -> None:
    run = fixture_run(isolated_runs, "quickstart-short")
    state = json.loads(run.state_path.read_text())
    (run.path / "state.json").write_text(json.dumps({**state, "profile_name": "p" * 387}))
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = await runs_screen(pilot)
        table = screen.query_one(DataTable)
        assert row_of(table, run)[3] == "p" * 39 + "…"
        assert sum(column.get_render_width(table) for column in table.columns.values()) < 160  # all on screen
