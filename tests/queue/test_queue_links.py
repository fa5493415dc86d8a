"""OOM retry attempts linked in the runs list (`workbench runs`, the runs screen) and in the scoreboard's header
(#25 step 3), on hand-made run folders linked as the keeper links them (backend.runs.attempts.record_retry; the
keeper's real OOM retry is checked in test_queue_keeper.py)."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import DataTable
from typer.testing import CliRunner

from backend.checkpoints.board_text import summary
from backend.checkpoints.scoreboard import scoreboard
from backend.cli.app import full_app
from backend.rundir.layout import RunFolder, RunState
from backend.runs.attempts import LINK_FILE, attempt_text, record_retry
from backend.runs.summaries import SummaryCache
from tui.app import WorkbenchApp
from tui.screens.runs import RunsScreen

NOTE = "OOM retry: micro-batch 4 -> 2, accumulation 1 -> 2; global batch 4 kept"
NO_CHECKPOINT = "no checkpoint yet (checkpoints appear every training.save_steps steps and at the end)"


def _run(workspace: Path, name: str, status: str) -> RunFolder:
    (workspace / name).mkdir(parents=True)
    run = RunFolder(workspace / name)
    now = time.time()
    run.write_state(RunState(run_id=name, profile_name="oom", status=status, created_at=now,
                             started_at=now, ended_at=now))
    return run


def test_an_oom_retry_is_linked_both_ways_in_the_runs_list_and_the_scoreboard(isolated_runs: Path) -> None:
    failed, retry, plain = (_run(isolated_runs, "run-a", "failed"), _run(isolated_runs, "run-b", "finished"),
                            _run(isolated_runs, "run-c", "finished"))
    cache = SummaryCache()
    assert {s.run.run_id: s.attempt for s in cache.reload().summaries} == {"run-a": "", "run-b": "", "run-c": ""}
    record_retry(str(retry.path), "run-b", 2, NOTE, str(failed.path), "run-a")
    of, retried = "attempt 2 of run-a, half micro-batch", "retried as run-b (attempt 2, half micro-batch)"
    # the settled runs' summaries are read again: their link file changed
    assert {s.run.run_id: s.attempt for s in cache.reload().summaries} == {"run-a": retried, "run-b": of,
                                                                           "run-c": ""}
    listing = CliRunner().invoke(full_app(), ["runs"])
    assert listing.exit_code == 0, listing.output
    assert f"  run-b: {of}" in listing.output and f"  run-a: {retried}" in listing.output
    assert "run-c:" not in listing.output
    assert summary(scoreboard(retry)) == f"{of} · {NO_CHECKPOINT}"
    assert summary(scoreboard(failed)) == f"{retried} · {NO_CHECKPOINT}"
    assert summary(scoreboard(plain)) == NO_CHECKPOINT
    assert scoreboard(retry).to_dict()["attempt"] == of
    (plain.path / LINK_FILE).write_text("{", encoding="utf-8")
    assert attempt_text(plain.path).startswith(f"attempt link damaged ({LINK_FILE}: ")


async def test_the_runs_screen_shows_the_attempt_column(isolated_runs: Path) -> None:
    failed, retry = _run(isolated_runs, "run-a", "failed"), _run(isolated_runs, "run-b", "failed")
    record_retry(str(retry.path), "run-b", 2, "OOM retry: gradient checkpointing switched on (micro-batch already "
                 "1); global batch kept", str(failed.path), "run-a")
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(200, 30)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        while not screen.loads:
            await pilot.pause(0.1)
        table = screen.query_one(DataTable)
        cells = {key: str(table.get_row(str(run.path))[-1]) for key, run in (("a", failed), ("b", retry))}
        assert cells == {"a": "retried as run-b (attempt 2, gradient checkpointing on)",
                         "b": "attempt 2 of run-a, gradient checkpointing on"}
