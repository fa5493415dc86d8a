"""A sweep's runs compared and ranked by the checkpoint scoreboard's best checkpoint (#25 step 4): from the Queue
screen (`c`), the runs list (`w`) and `workbench queue sweep NAME`. Three copies of the shared real LoRA run
(checkpoint-4, evaluated) given eval losses 0.9, 0.5 and 0.7 at step 4, and a fourth run with no checkpoint."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable
from typer.testing import CliRunner

from backend.checkpoints.scoreboard import scoreboard
from backend.cli.app import full_app
from backend.contract.event_writer import EventWriter
from backend.profile import LaunchProfile
from backend.queue.add import add_profiles
from backend.queue.store import QueueRefused, edit
from backend.queue.sweep import rank_runs, sweep_runs
from backend.rundir.layout import RunFolder, RunState
from tui.app import WorkbenchApp
from tui.screens.compare import CompareScreen
from tui.screens.queue import QueueScreen
from tui.screens.runs import RunsScreen

LOSSES = {"run-a": 0.9, "run-b": 0.5, "run-c": 0.7}


@pytest.fixture
def sweep(short_lora_run: Any, isolated_runs: Path, tmp_path: Path) -> dict[str, Any]:
    runs: dict[str, RunFolder] = {}
    for name, value in LOSSES.items():
        shutil.copytree(short_lora_run.path, isolated_runs / name, ignore=shutil.ignore_patterns("jobs"))
        runs[name] = RunFolder(isolated_runs / name)
        key = scoreboard(runs[name]).metric.key
        EventWriter(runs[name].events_path).write("eval", step=4, metrics={key: value})  # the last one written counts
    (isolated_runs / "run-d").mkdir()
    runs["run-d"] = RunFolder(isolated_runs / "run-d")
    runs["run-d"].write_state(RunState(run_id="run-d", profile_name="s", status="running", started_at=time.time()))
    grid = LaunchProfile.model_validate({"name": "s", "sweep": {"training.learning_rate": [1e-4, 2e-4, 3e-4, 4e-4, 5e-4]}})
    entries = add_profiles([(grid, tmp_path)])
    (other,) = add_profiles([(LaunchProfile(name="alone"), tmp_path)])
    with edit() as queue:
        for entry, name in zip(entries, runs, strict=False):  # the fifth has not started
            mine = queue.find(entry.id)
            mine.state, mine.run_id, mine.run_dir = ("running" if name == "run-d" else "done"), name, str(runs[name].path)
            mine.outcome = None if name == "run-d" else "finished"
    return {"runs": runs, "entries": entries, "other": other, "metric": scoreboard(runs["run-a"]).metric.label}


def test_the_sweep_is_ranked_by_the_scoreboards_best_checkpoint(sweep: dict[str, Any]) -> None:
    runs, metric = sweep["runs"], sweep["metric"]
    name, dirs = sweep_runs("s")
    assert (name, dirs) == ("s", [str(runs[n].path) for n in ("run-a", "run-b", "run-c", "run-d")])
    ranked = rank_runs(dirs)
    assert [(r.run_id, r.value) for r in ranked] == [("run-b", 0.5), ("run-c", 0.7), ("run-a", 0.9), ("run-d", None)]
    assert ranked[0].text == f"best: checkpoint-4: lowest {metric} 0.5"
    assert sweep_runs(run_dir=str(runs["run-c"].path)) == (name, dirs)  # found from one of its runs
    with pytest.raises(QueueRefused, match=r"'t' is no sweep in the queue; sweeps: s \(s"):
        sweep_runs("t")
    result = CliRunner().invoke(full_app(), ["queue", "sweep", "s"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "sweep s: 4 run(s), ranked by their best checkpoint",
        f"   1  run-b  best: checkpoint-4: lowest {metric} 0.5",
        f"   2  run-c  best: checkpoint-4: lowest {metric} 0.7",
        f"   3  run-a  best: checkpoint-4: lowest {metric} 0.9",
        "   -  run-d  no checkpoint yet (checkpoints appear every training.save_steps steps and at the end)"]


async def _until(pilot: Pilot, ok: Callable[[], object], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.1)


def _ranked_rows(screen: CompareScreen) -> list[tuple[str, str]]:
    table = screen.query_one(DataTable)
    return [(str(table.get_row_at(i)[0]), str(table.get_row_at(i)[1])) for i in range(table.row_count)]


async def test_c_in_the_queue_and_w_in_the_runs_list_open_the_sweep_ranked(sweep: dict[str, Any]) -> None:
    expected = [("1", "run-b"), ("2", "run-c"), ("3", "run-a"), ("-", "run-d")]
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(200, 40)) as pilot:
        runs_screen = pilot.app.screen
        assert isinstance(runs_screen, RunsScreen)
        await pilot.press("f7")
        queue_screen = pilot.app.screen
        assert isinstance(queue_screen, QueueScreen)
        await _until(pilot, lambda: queue_screen.loads > 0, "the queue")
        other = [e.id for e in queue_screen.entries].index(sweep["other"].id)
        queue_screen.query_one(DataTable).move_cursor(row=other)
        await pilot.press("c")  # not a sweep: said, nothing opened
        await _until(pilot, lambda: any("is not part of a sweep" in n.message for n in pilot.app._notifications),
                     "the notice")
        queue_screen.query_one(DataTable).move_cursor(row=0)
        await pilot.press("c")
        await _until(pilot, lambda: isinstance(pilot.app.screen, CompareScreen), "the compare view")
        compare = pilot.app.screen
        assert isinstance(compare, CompareScreen) and compare.title == "compare 4 runs of sweep s"
        await _until(pilot, lambda: compare.query_one(DataTable).row_count == 4, "the ranked table")
        assert _ranked_rows(compare) == expected
        await pilot.press("escape", "escape")
        await _until(pilot, lambda: pilot.app.screen is runs_screen and runs_screen.loads > 0, "the runs list")
        table = runs_screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(str(sweep["runs"]["run-a"].path)))
        await pilot.press("w")
        await _until(pilot, lambda: isinstance(pilot.app.screen, CompareScreen), "the compare view from the runs list")
        compare = pilot.app.screen
        assert isinstance(compare, CompareScreen)
        await _until(pilot, lambda: compare.query_one(DataTable).row_count == 4, "the ranked table")
        assert _ranked_rows(compare) == expected
