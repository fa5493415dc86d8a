"""The runs list's `d` on a folder that only looks like a run (a state.json, no run.json): the list shows
it, the user confirms, and the TUI still refuses with the reason and leaves every file in place."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import fixture_run, wait_for
from textual.widgets import DataTable

from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.screens.runs import RunsScreen


async def test_d_on_a_folder_that_is_not_a_run_deletes_nothing(isolated_runs: Path) -> None:
    decoy = fixture_run(isolated_runs, "quickstart-short").path
    (decoy / "run.json").unlink()  # what an older workbench or a stranger leaves: a state.json only
    (decoy / "thesis.tex").write_text("years of work")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        await wait_for(pilot, lambda: screen.loads > 0, what="the runs list")
        table = screen.query_one(DataTable)
        assert table.row_count == 1  # the decoy is listed (a folder of the workspace with a state.json)
        table.move_cursor(row=table.get_row_index(str(decoy)))
        await pilot.press("d")
        assert isinstance(pilot.app.screen, ConfirmModal)
        await pilot.click("#choice-ok")
        await wait_for(pilot, lambda: any(n.title == "Not deleted" for n in pilot.app._notifications),
                       what="the refusal")
        refusal = next(n.message for n in pilot.app._notifications if n.title == "Not deleted")
        assert refusal == f"not deleted: {decoy} is not a workbench run folder (run.json is missing)"
    assert (decoy / "thesis.tex").read_text() == "years of work"
    assert (decoy / "state.json").is_file()
