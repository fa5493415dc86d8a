"""A real terminal for tests: a private tmux server (its own socket, this test's environment), driven by
keys and read back with capture-pane. Killing its server is what a dropped SSH link does to a terminal:
the pty hangs up, the kernel sends SIGHUP to the session, and every process of it that does not protect
itself dies."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.timing import limit_text, scaled, wait_until

REPO = Path(__file__).resolve().parents[1]
WORKBENCH = Path(sys.executable).parent / "workbench"


class Tmux:
    def __init__(self, socket: Path) -> None:
        self.base = ["tmux", "-S", str(socket)]

    def __call__(self, *args: str, check: bool = False) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, cwd=REPO, check=check).stdout

    def start(self, session: str, command: str, size: tuple[int, int] = (160, 48)) -> int:
        """Start `command` in a new terminal (tmux session); return the pid of the pane's process.

        COLUMNS/LINES of the test runner would override the terminal's real size. The pane stays on the screen
        after its command exits (remain-on-exit, set in the same tmux call, before the command can end): a
        command that prints its last line and exits would otherwise take the screen with it."""
        line = f"cd {shlex.quote(str(REPO))} && exec env -u COLUMNS -u LINES TERM=xterm-256color {command}"
        self("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), line,
             ";", "set-option", "-t", session, "remain-on-exit", "on", check=True)
        return int(self("display-message", "-p", "-t", session, "#{pane_pid}").strip())

    def screen(self, session: str) -> str:
        return self("capture-pane", "-p", "-t", session)

    def keys(self, session: str, *keys: str) -> None:
        for key in keys:
            self("send-keys", "-t", session, key)
            time.sleep(0.15)

    def wait_for(self, session: str, pattern: str, timeout: float = 90) -> re.Match[str]:
        """The first match of `pattern` (a regex) on the screen; frames may be captured half drawn."""
        screen = ""

        def found() -> re.Match[str] | None:
            nonlocal screen
            screen = self.screen(session)
            return re.search(pattern, screen)

        return wait_until(found, timeout, f"{pattern!r} in tmux session {session}", interval=0.3,
                          detail=lambda: f"the screen was:\n{screen}")

    def hang_up(self) -> None:
        """Kill the tmux server: every terminal of it hangs up, as when the SSH link drops."""
        self("kill-server")


def session_processes(sid: int) -> list[psutil.Process]:
    """Live processes of a terminal session (zombies not counted)."""
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (psutil.Error, OSError):
            continue
    return alive


def wait_until_gone(sid: int, timeout: float = 20) -> None:
    """Every process of the terminal session `sid` has ended."""
    limit, start = scaled(timeout), time.monotonic()
    while session_processes(sid) and time.monotonic() - start < limit:
        time.sleep(0.2)
    left = [" ".join(p.cmdline()) for p in session_processes(sid)]
    assert not left, f"still running {time.monotonic() - start:.0f} s (limit {limit_text(timeout)}) after the hang-up: {left}"
