"""Snapshots of the monitor on the recorded fp16 run (overflow markers, every panel) at 80x24 and 160x48.

Deterministic: a finished run's times come from its state.json, the clock is frozen, and
the memory panel shows a fixed sample instead of this machine's memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_fixtures import FIXED_NOW, FixedSystem, fixture_run, open_monitor, wait_for

from tui.app import WorkbenchApp


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_monitor_snapshot(size: tuple[int, int], snap_compare, tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "cpu-fp16-overflow")

    async def open_it(pilot) -> None:
        screen = await open_monitor(pilot, run.path, clock=lambda: FIXED_NOW, system_monitor=FixedSystem())
        await wait_for(pilot, lambda: screen.sample is not None, what="the fixed memory sample")
        await pilot.pause()

    assert snap_compare(WorkbenchApp(None, start_mode="runs"), terminal_size=size, run_before=open_it)
