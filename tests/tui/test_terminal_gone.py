"""A `workbench` whose terminal closes under it ends, instead of spinning (found: one left behind by a
closed pty used 75 % of a core for an hour).

The app runs in a real pseudo-terminal that is not its controlling terminal (as a script or a bench starts
it), so closing the terminal's other side sends it no SIGHUP: it must notice by itself."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[2]


def test_the_tui_ends_when_its_terminal_is_hung_up(tmp_path: Path, isolated_runs: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    process = subprocess.Popen([sys.executable, "-m", "backend.cli"], stdin=slave, stdout=slave,
                               stderr=slave, env=env, cwd=REPO, start_new_session=True)
    os.close(slave)
    try:
        seen = bytearray()
        deadline = time.monotonic() + 120
        while b"quickstart" not in seen and time.monotonic() < deadline:  # the launch workspace is drawn
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
        assert b"quickstart" in seen and process.poll() is None, bytes(seen[-500:])
        os.close(master)  # the terminal's other side is gone (sshd ended, the window closed)
        master = -1
        try:
            process.wait(timeout=scaled(30))  # the app looks every 5 s
        except subprocess.TimeoutExpired:
            cpu = psutil.Process(process.pid).cpu_percent(interval=1.0)
            raise AssertionError(f"the TUI still runs 30 s after its terminal closed, at {cpu:.0f} % CPU") from None
        assert process.returncode == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if master >= 0:
            os.close(master)
