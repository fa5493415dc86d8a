"""Names and lines from data print as written in every list and log view: markup stays text
(`x [/] y` would raise a MarkupError, `[rank0]: ...` would lose its prefix, `[b]` would turn
bold), and control characters show as escapes instead of acting on the terminal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_fixtures import FIXTURES, open_monitor, wait_for
from textual.widgets import DataTable, OptionList, RichLog

from backend.core.paths import BUILTIN_DATASETS
from backend.profile import load_profile, save_profile
from backend.rundir.layout import RunFolder
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle, shown
from tui.app import WorkbenchApp
from tui.modals.dialogs import PathPromptScreen
from tui.screens.compare import CompareScreen
from tui.widgets.dataset_details import DatasetSummary
from tui.widgets.validation_panel import ValidationPanel

NAME = "x [/] y \x1b]0;pwned\x07"  # markup that raises, and a sequence that would retitle the terminal
NAME_SHOWN = "x [/] y \\x1b]0;pwned\\x07"
LOG_LINE = "[rank0]: boom [b]bold?[/b] \x1b[31mred"
LOG_SHOWN = "[rank0]: boom [b]bold?[/b] \\x1b[31mred"
FILE = "data [b]x"  # (a file name cannot hold "/", so no closing tag here)


def hostile_run(workspace: Path, folder_name: str) -> RunFolder:
    folder = workspace / folder_name
    folder.mkdir(parents=True)
    for suffix, target in ((".jsonl", "events.jsonl"), (".output.log", "output.log"), (".state.json", "state.json"),
                           (".toml", "profile.toml")):
        shutil.copy(FIXTURES / f"quickstart-short{suffix}", folder / target)
    state = json.loads((folder / "state.json").read_text())
    state["profile_name"] = NAME
    (folder / "state.json").write_text(json.dumps(state))
    with (folder / "output.log").open("a") as log:
        log.write(LOG_LINE + "\n")
    run = RunFolder(folder)
    run.write_identity()
    return run


async def test_runs_list_monitor_log_and_compare(isolated_runs: Path) -> None:
    first = hostile_run(isolated_runs, "run [b]one \x1b[2J")
    second = hostile_run(isolated_runs, "run [rank0]")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(200, 40)) as pilot:
        table = pilot.app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 2, what="the runs list")
        await pilot.pause()
        listed = shown(table)
        assert NAME_SHOWN in listed and "run [b]one \\x1b[2J" in listed and "run [rank0]" in listed

        monitor = await open_monitor(pilot, first.path)
        log = monitor.query_one(RichLog)
        await wait_for(pilot, lambda: LOG_SHOWN in shown(log), what="the hostile log line")
        await pilot.press("escape")

        await pilot.app.push_screen(CompareScreen([first.path, second.path]))
        compare = pilot.app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: compare.row_count == 2, what="the compare table")
        await pilot.pause()
        assert "run [b]one \\x1b[2J" in shown(compare) and "run [rank0]" in shown(compare)


@pytest.fixture
def hostile_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile named NAME, training on a dataset in a folder with markup in its name, validating
    on a file that does not exist; the folder also holds a profile with markup in its file name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / FILE).mkdir()
    shutil.copy(BUILTIN_DATASETS["self-cognition"], tmp_path / FILE / "[rank0].jsonl")
    profile = load_profile(QUICKSTART)
    profile.name = "x [/] y"
    profile.data.train = [f"./{FILE}/[rank0].jsonl"]
    profile.data.val = ["./missing [b]z.jsonl"]
    save_profile(profile, tmp_path / "other [b]profile.toml")
    return save_profile(profile, tmp_path / "hostile.toml")


async def test_launch_workspace_views(hostile_profile: Path) -> None:
    app = WorkbenchApp(hostile_profile, hardware=CPU_BOX)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await settle(pilot)
        screen = app.screen
        assert shown(screen.query_one("#status-profile")).startswith("x [/] y — hostile.toml")

        problems = shown(screen.query_one(ValidationPanel).query_one(OptionList))
        assert "missing [b]z.jsonl" in problems

        screen.form.show_tab("data")
        await pilot.pause()
        summary = shown(screen.query_one(DatasetSummary))
        assert f"./{FILE}/[rank0].jsonl [local] 53 rows" in summary, summary[:300]
        assert "missing [b]z.jsonl" in summary

        await pilot.press("f5")  # refused: the toast names the missing file as written
        await wait_for(pilot, lambda: "missing [b]z.jsonl" in " ".join(shown(t) for t in app.screen.query("Toast")),
                       what="the launch-refused toast")

        await pilot.press("f8")
        await wait_for(pilot, lambda: f"{FILE}/[rank0].jsonl" in shown(app.screen.query_one("#dataset-list")),
                       what="the dataset picker to list the file")
        await pilot.press("escape")

        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
        await wait_for(pilot, lambda: "other [b]profile.toml" in shown(app.screen.query_one("#path-suggestions")),
                       what="the open dialog to offer the profile")
