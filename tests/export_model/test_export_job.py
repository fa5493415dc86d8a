"""#34 item 14: the export pipeline (merge -> export -> two parity jobs) is one tracked job of the run, on a private
copy of the shared short LoRA run: exclusive (a second `x` names the running job and starts nothing), it goes on
when the TUI quits (its record says it finished), and `workbench jobs RUN --stop JOB` stops it and the merge it
started (proven its by the merge's record)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.core.process_identity import job_marker
from backend.jobs.job import JobFolder, JobState, children, list_jobs, refresh_job
from backend.rundir.layout import RunFolder
from backend.ship.pipeline import read_result
from tests.scoreboard.scoreboard_helpers import open_scoreboard
from tests.shared_runs import private_copy
from tests.timing import wait_until
from tests.tui.run_fixtures import wait_for
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmScreen


@pytest.fixture
def run(short_lora_run: RunFolder, tmp_path: Path) -> Iterator[RunFolder]:
    with private_copy(short_lora_run, tmp_path) as copy:
        yield copy


def _pipelines(run: RunFolder) -> list[JobFolder]:
    return list_jobs(run.jobs_dir, kind="ship")


def _running_merge(job: JobFolder) -> JobFolder | None:
    return next(
        (c for c in children(job) if c.read_state().kind == "merge" and c.read_state().status == "running"), None
    )


def _ended(job: JobFolder) -> JobState | None:
    state = refresh_job(job)
    return None if state.is_active else state


def test_jobs_stop_stops_the_export_and_the_merge_it_started(run: RunFolder) -> None:
    started = CliRunner().invoke(full_app(), ["export-model", str(run.path), "--to", "merged", "--detach"])
    assert started.exit_code == 0, started.output
    (job,) = _pipelines(run)
    assert f"export job {job.job_id} started (log: {job.log_path})" in started.output.splitlines()
    merge = wait_until(lambda: _running_merge(job), 120, "the export's merge job running")
    stopped = CliRunner().invoke(full_app(), ["jobs", str(run.path), "--stop", job.job_id])
    assert stopped.exit_code == 0, stopped.output
    assert stopped.output.splitlines() == [
        f"job {job.job_id}: stopped",
        f"  started by it: job {merge.job_id}: stopped",
    ]
    assert (refresh_job(job).status, refresh_job(merge).status) == ("stopped", "stopped")
    assert not job_marker(job.path).processes() and not job_marker(merge.path).processes()
    assert not (run.path / "merged" / "checkpoint-4-merged").exists()


async def test_a_second_x_names_the_running_export_and_quitting_leaves_it_running(run: RunFolder) -> None:
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        board = await open_scoreboard(pilot, run.path)
        for press in (1, 2):
            board.focus_rows()
            await pilot.press("x")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), what="the export choice")
            await pilot.click("#choice-merged")
            if press == 1:
                await wait_for(pilot, lambda: len(_pipelines(run)) == 1, what="the export job")
        (job,) = _pipelines(run)
        await wait_for(
            pilot,
            lambda: any(n.title == "Export running" for n in pilot.app._notifications),
            what="the refusal of a second export",
        )
        note = next(n for n in pilot.app._notifications if n.title == "Export running")
        assert note.message.startswith(f"an export of this run is running: job {job.job_id} (")
        assert len(_pipelines(run)) == 1  # the second press started nothing
        await wait_for(
            pilot,
            lambda: str(board.query_one(".export").render()).startswith(f"export job {job.job_id}: "),
            what="the export's line on the scoreboard",
        )
    assert refresh_job(job).is_active  # the app has quit; the export goes on
    state = wait_until(lambda: _ended(job), 600, "the export's end", detail=lambda: job.log_tail(2000))
    assert state.status == "finished", job.log_tail(4000)
    assert read_result(job)["folder"] == str(run.path / "merged" / "checkpoint-4-merged")  # type: ignore[index]
    assert sorted(c.read_state().kind for c in children(job)) == ["infer", "infer", "merge"]
