"""Reattach in a real terminal: the app runs in tmux, the tmux session is killed (as a dropped SSH
link would), the run goes on, and the app started again in a new session shows it advancing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_fixtures import REPO, long_quickstart

from backend.runs.manager import refresh, start_run, stop_run
from backend.runs.process import run_processes

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
# COLUMNS/LINES of the test runner would override the terminal's real size
APP = (f"env -u COLUMNS -u LINES TERM=xterm-256color {sys.executable} -c "
       "'from tui.app import WorkbenchApp; WorkbenchApp(None, start_mode=\"runs\").run()'")
STEP = re.compile(r"step (\d+)/(\d+)")


class Tmux:
    """A private tmux server (its own socket), so it has this test's environment and nobody else's."""

    def __init__(self, name: str):
        self.socket = name

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, cwd=REPO)
        return done.stdout

    def start(self, session: str) -> None:
        self("new-session", "-d", "-s", session, "-x", "160", "-y", "48", APP)

    def screen(self, session: str) -> str:
        return self("capture-pane", "-p", "-t", session)

    def wait_for(self, session: str, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.screen(session))
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} never showed in tmux session {session}:\n{self.screen(session)}")

    def open_first_run(self, session: str, run_id: str) -> int:
        """Wait for the runs list, open the run under the cursor (running runs come first), read its step."""
        self.wait_for(session, re.escape(run_id))
        self("send-keys", "-t", session, "Enter")
        return int(self.wait_for(session, STEP.pattern).group(1))

    def step(self, session: str) -> int:
        return int(self.wait_for(session, STEP.pattern).group(1))


def test_kill_the_terminal_then_reattach(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = start_run(long_quickstart(), base_dir=REPO / "profiles")
    tmux = Tmux(f"wb-test-{run.run_id}")
    try:
        tmux.start("first")
        first = tmux.open_first_run("first", run.run_id)
        deadline = time.monotonic() + 90
        while tmux.step("first") < max(first, 1) + 3 and time.monotonic() < deadline:
            time.sleep(0.5)  # swift takes a while to start: see it train under the first app
        seen = tmux.step("first")
        assert seen >= max(first, 1) + 3, tmux.screen("first")

        tmux("kill-session", "-t", "first")  # the terminal is gone, and the app with it
        time.sleep(1.0)
        assert refresh(run).is_active and run_processes(run.path)

        tmux.start("second")
        again = tmux.open_first_run("second", run.run_id)
        assert again >= seen
        deadline = time.monotonic() + 30
        while tmux.step("second") <= again and time.monotonic() < deadline:
            time.sleep(0.5)
        assert tmux.step("second") > again, tmux.screen("second")
    finally:
        tmux("kill-server")
        if refresh(run).is_active:
            stop_run(run)
