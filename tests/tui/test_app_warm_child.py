"""The app's warm oracle child ends with the app that started it, and only that one: a warm child the process
kept before the app opened (the tests keep one: tests/warm_oracle.py) is handed back running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest
from run_fixtures import wait_for

from backend.oracle import OracleCache, ask, runner
from tests.timing import wait_until
from tui.app import WorkbenchApp


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.one_shot_oracle  # no warm child before the app: it starts its own
async def test_the_warm_child_the_app_started_ends_with_it(isolated_runs: Path, tmp_path: Path) -> None:
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.warm_child_started, what="the app's warm child")
        pid = (await asyncio.to_thread(ask, "echo", {"who": "the app"}, cache=OracleCache(tmp_path)))["pid"]
        assert runner.warm_pid() == pid
    wait_until(lambda: not _running(pid), 10, "the app's warm child to end with the app")
    assert runner.warm_pid() is None


async def test_a_warm_child_kept_before_the_app_is_handed_back_running(isolated_runs: Path, tmp_path: Path) -> None:
    pid = ask("echo", {"who": "kept"}, cache=OracleCache(tmp_path))["pid"]  # the child this test was lent
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.first_frame_shown, what="the app's first frame")
        await pilot.pause()
        answer = await asyncio.to_thread(ask, "echo", {"who": "the app"}, cache=OracleCache(tmp_path))
        assert answer["pid"] == pid and not app.warm_child_started  # the app's questions went to the kept one
    assert _running(pid) and runner.warm_pid() == pid
