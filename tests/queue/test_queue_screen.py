"""The Queue screen (F7) as rendered: order, state and why each entry waits; its keys reorder, pause and
remove (in the queue file); F5's dialog in the workspace offers "Queue" beside "Start now"."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from backend.profile import LaunchProfile
from backend.queue.add import add_profiles
from backend.queue.store import read_queue
from tests.tui.conftest import QUICKSTART, settle
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal, ConfirmScreen
from tui.screens.queue import QueueScreen


async def _until(pilot: Pilot, ok: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.1)


def _rows(screen: QueueScreen) -> list[list[str]]:
    table = screen.query_one(DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def test_the_queue_screen_shows_why_each_waits_and_its_keys_change_the_queue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    sweep = LaunchProfile.model_validate({"name": "s", "sweep": {"tuner.lora_rank": [4, 8]}})
    a, b = add_profiles([(sweep, tmp_path)])  # waiting (no keeper is started here)
    (held,) = add_profiles([(LaunchProfile(name="held"), tmp_path)], hold=True)
    folder = tmp_path / "data" / "queue"
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 30)) as pilot:
        await pilot.press("f7")
        screen = pilot.app.screen
        assert isinstance(screen, QueueScreen)
        await _until(pilot, lambda: screen.loads > 0, "the queue")
        head = str(screen.query_one("#queue-head", Static).render())
        assert "3 pending, 0 done; no keeper running" in head
        rows = _rows(screen)
        assert [r[:4] for r in rows] == [["1", a.id, "s-rank4", "waiting"], ["2", b.id, "s-rank8", "waiting"],
                                         ["3", held.id, "held", "paused"]]
        assert rows[0][5] == "next: starts at the keeper's next look"
        assert rows[1][5] == f"after s-rank4 ({a.id})"
        assert rows[2][5].startswith(f"paused (`workbench queue resume {held.id}`")
        assert [r[4] for r in rows] == ["now", "unknown", "unknown"]  # nothing says how long s-rank4 takes
        assert str(screen.query_one("#queue-notes", Static).render()) == (
            "start unknown: no basis for how long s-rank4 takes (no finished or running run of its recipe in the "
            "queue)")
        await pilot.press("n")  # the first one down
        await _until(pilot, lambda: [e.id for e in read_queue(folder).entries][:2] == [b.id, a.id], "the move")
        await _until(pilot, lambda: _rows(screen)[0][1] == b.id, "the list repainted")
        await pilot.press("p")  # pause the one under the cursor (row 0)
        await _until(pilot, lambda: read_queue(folder).find(b.id).state == "paused", "the pause")
        await pilot.press("x")
        assert isinstance(pilot.app.screen, ConfirmModal)
        await pilot.click("#choice-ok")
        await _until(pilot, lambda: b.id not in [e.id for e in read_queue(folder).entries], "the removal")


async def test_f5_offers_queue_and_queues_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     isolated_runs: Path) -> None:
    monkeypatch.setattr("backend.queue.keeper.ensure_keeper", lambda folder=None: None)  # no real run here
    app = WorkbenchApp(QUICKSTART)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f5")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        labels = [str(b.label) for b in app.screen.query("Button")]
        assert labels == ["Start now", "Queue", "Cancel"]
        await pilot.click("#choice-queue")
        folder = isolated_runs.parent / "data" / "queue"
        await _until(pilot, lambda: (folder / "queue.json").exists() and read_queue(folder).entries, "the entry")
    (entry,) = read_queue(folder).entries
    assert (entry.name, entry.state, entry.base_dir) == ("quickstart", "waiting", str(QUICKSTART.parent))
    assert not list(isolated_runs.glob("*"))  # queued, not started
