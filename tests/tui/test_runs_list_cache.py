"""The runs list reloads every 2 s: a reload reads only what changed since the last one.

A run whose files did not change is not read again (its events file is not opened), and damaged
run folders are checked against one scan of the host's processes per reload, not one a folder.
The CPU a reload costs with 200 and 500 folders is measured by bench/runs_list_bench.py.
"""

from __future__ import annotations

import builtins
import io
import json
from pathlib import Path

import psutil
import pytest
from run_fixtures import fixture_run, wait_for
from textual.widgets import DataTable

from tui.app import WorkbenchApp
from tui.screens.runs import RunsScreen

NAMES = ("quickstart-short", "cpu-fp16-overflow", "broken-data")


class Opens:
    """Every file opened by path while it counts, on any thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        real = builtins.open

        def counting(file, *args, **kwargs):  # type: ignore[no-untyped-def]
            if isinstance(file, (str, Path)):
                self.paths.append(Path(file).resolve())
            return real(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", counting)
        monkeypatch.setattr(io, "open", counting)

    def events(self) -> set[Path]:
        """The events files opened."""
        return {path for path in self.paths if path.name == "events.jsonl"}


async def reload(pilot, screen: RunsScreen) -> None:
    """What the timer does every 2 s (F5 does it now), and wait until the list has arrived."""
    loads = screen.loads
    await pilot.press("f5")
    await wait_for(pilot, lambda: screen.loads > loads, what="the reload")


async def test_a_reload_with_nothing_changed_reads_no_events_file(isolated_runs: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: fixture_run(isolated_runs, name) for name in NAMES}
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
        table = screen.query_one(DataTable)
        first = [[str(cell) for cell in table.get_row(str(run.path))] for run in runs.values()]
        opens = Opens(monkeypatch)
        await reload(pilot, screen)
        assert opens.events() == set()
        assert [[str(cell) for cell in table.get_row(str(run.path))] for run in runs.values()] == first

        short = runs["quickstart-short"]  # one run's events file grows: that run alone is read again
        with open(short.events_path, "a") as handle:
            handle.write(json.dumps({"v": 1, "type": "log", "rank": 0, "time": 1795951000.0, "step": 40,
                                     "max_steps": 40, "loss": 0.125}) + "\n")
        opens.paths.clear()
        await reload(pilot, screen)
        assert opens.events() == {short.events_path}
        assert first[0][5] != "0.125" and str(table.get_row(str(short.path))[5]) == "0.125"  # the new loss


async def test_damaged_folders_cost_one_process_scan_a_reload_at_most(isolated_runs: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_run(isolated_runs, "quickstart-short")
    for number in range(6):  # a run folder whose state.json is gone or is not JSON
        folder = isolated_runs / f"20260101-damaged-{number}"
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps({"kind": "finetune-workbench run", "run_id": folder.name,
                                                     "created_at": 1795950000.0 + number, "host": "h"}))
        if number % 2:
            (folder / "state.json").write_text("{not json")
    scans: list[int] = []
    real = psutil.process_iter

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        scans.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(psutil, "process_iter", counted)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
        table = screen.query_one(DataTable)
        assert table.row_count == 7
        damaged = [key.value for key in table.rows if "damaged" in str(table.get_row(key)[1])]
        assert len(damaged) == 6
        assert len(scans) <= 1  # the first reload: one scan serves the six damaged folders
        before = len(scans)
        await reload(pilot, screen)
        assert len(scans) == before  # nothing changed: none has a process, none is scanned for again
