"""An SSH drop as it happens: the run is launched with F5 from the workbench in a real terminal (tmux); the
terminal goes (its tmux server is killed, as a dropped SSH link does: the pty hangs up, SIGHUP reaches the
session); the run keeps stepping; the workbench opened again in a new terminal shows it advancing, the
step on screen being one the run wrote to events.jsonl, and follows it to its end. The run is long enough never
to end by itself within the test (a loaded machine slows the reattach as much as the steps): it is stopped, and
the new screen says so at the last step it logged. That a run finishes after its terminal drops is
tests/runs/test_run_lifecycle.py's hang-up test."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from backend.core.process_identity import run_processes
from backend.rundir.index import known_folders
from backend.rundir.layout import RunFolder
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.runs.helpers import first_log_at, log_events, quick_profile, wait_for
from tests.tmux_session import WORKBENCH, Tmux, wait_until_gone

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
MAX_STEPS = 20_000  # the tiny model steps ~55/s on an idle machine: six minutes, never reached here
STEP = rf"step (\d+)/{MAX_STEPS}"


def _logged_steps(run: RunFolder) -> set[int]:
    return {e["step"] for e in log_events(run)}


def _next_step_on_screen(tmux: Tmux, session: str, run: RunFolder, after: int, timeout: float = 60) -> int:
    """Wait until the monitor shows a step past `after`; it must be one the run logged in events.jsonl."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = int(tmux.wait_for(session, STEP, timeout=timeout).group(1))
        if shown > after:
            assert shown in _logged_steps(run), (shown, sorted(_logged_steps(run))[-5:])
            return shown
        time.sleep(0.3)
    raise AssertionError(f"the step on screen never went past {after}:\n{tmux.screen(session)}")


def test_launch_with_f5_drop_the_terminal_then_reattach(tiny_model: Path, isolated_runs: Path,
                                                       tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": MAX_STEPS, "logging_steps": 1})
    tmux = Tmux(tmp_path / "tmux.sock")
    run: RunFolder | None = None
    try:
        first = tmux.start("first", f"{WORKBENCH} --profile {profile}")
        tmux.wait_for("first", "No problems: ready to launch")
        tmux.keys("first", "F5")
        tmux.wait_for("first", f"{MAX_STEPS} steps")  # the confirmation names what starts
        tmux.keys("first", "Enter")
        run = RunFolder(wait_for(lambda: known_folders(), what="the run folder")[0])
        # swift's start-up takes 15 s on an idle machine
        seen = _next_step_on_screen(tmux, "first", run, after=0, timeout=300)  # the monitor follows the run
        seen = _next_step_on_screen(tmux, "first", run, after=seen)

        tmux.hang_up()  # the SSH link drops: the terminal and the workbench in it are gone
        wait_until_gone(first)
        at_drop = log_events(run)[-1]["step"]
        assert refresh(run).is_active and run_processes(run.path)
        wait_for(first_log_at(run, at_drop + 5), timeout=60, what="the run to go on after the drop")

        tmux.start("second", str(WORKBENCH))  # a new SSH session, the workbench again
        tmux.wait_for("second", "Runs")
        tmux.keys("second", "F3")
        tmux.wait_for("second", re.escape(run.run_id))
        tmux.keys("second", "Enter")  # running runs come first: the cursor is on it
        again = _next_step_on_screen(tmux, "second", run, after=at_drop)
        _next_step_on_screen(tmux, "second", run, after=again)  # it advances on the new screen

        stop_run(run)
        state = refresh(run)
        assert state.status == "stopped", (state, run.log_tail()[-2000:])
        last = log_events(run)[-1]["step"]
        assert again < last < MAX_STEPS, (again, last)
        tmux.wait_for("second", f"step {last}/{MAX_STEPS}")  # the new screen followed it to its last step
        tmux.wait_for("second", "stopped")
    finally:
        tmux.hang_up()
        if run is not None and refresh(run).is_active:
            stop_run(run)
