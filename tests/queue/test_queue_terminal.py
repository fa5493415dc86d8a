"""The terminal that queued the runs hangs up (tmux killed, as an SSH drop): the keeper, in a session of its
own, runs the queued runs (a 2-value sweep of one-step runs) one after another to their end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.queue.keeper import keeper_marker, keeper_pid
from backend.queue.store import read_queue
from backend.rundir.layout import RunFolder
from tests.runs.helpers import quick_profile, wait_for
from tests.tmux_session import WORKBENCH, Tmux, wait_until_gone

pytestmark = pytest.mark.slow  # two real one-step trainings


def test_queued_runs_go_on_after_the_terminal_that_queued_them_hangs_up(
        isolated_runs: Path, tiny_model: Path, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    profile = quick_profile(tmp_path, training={"max_steps": 1, "save_steps": 1},
                            sweep={"training.learning_rate": [1e-3, 2e-3]})
    folder = isolated_runs.parent / "data" / "queue"
    tmux = Tmux(tmp_path / "tmux.sock")
    try:
        sid = tmux.start("ssh", f"{WORKBENCH} queue add {profile}", size=(120, 30))
        # queue add prints its keeper's pid and exits: the pane stays on the screen (tests/tmux_session.py)
        tmux.wait_for("ssh", r"keeper: pid \d+", timeout=90)
    finally:
        tmux.hang_up()
    wait_until_gone(sid)
    try:
        assert keeper_pid(folder) is not None  # the terminal is gone, the keeper is not
        wait_for(lambda: not read_queue(folder).keeps_keeper(), 400, "both queued runs done")
        entries = read_queue(folder).entries
        assert [(e.name, e.outcome) for e in entries] == [("quickstart-test-lr0.001", "finished"),
                                                          ("quickstart-test-lr0.002", "finished")]
        first, second = (RunFolder(str(e.run_dir)).read_state() for e in entries)
        assert first.ended_at is not None and second.created_at >= first.ended_at - 1.0  # one after another
    finally:
        for proc in keeper_marker(folder).processes():
            proc.kill()
