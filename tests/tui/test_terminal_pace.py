"""A terminal that falls behind gets fewer monitor updates, and the header says so (#17).

The state machine is checked with a hand-driven clock, the app's wiring with a fake "is the
terminal full" answer; one test runs the real app in a real pseudo-terminal whose reader stops
reading for a while, with nothing faked: the app must notice, say so, and step back once the
reader drains the terminal again.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from run_fixtures import FixedSystem, fixture_run, open_monitor, wait_for

from backend.rundir import index
from tests.timing import scaled, wait_until
from tui.app import WorkbenchApp
from tui.screens.monitor import KEEP_GOING
from tui.terminal_pace import CLEAR_SECONDS, Pace, TerminalPace

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>NOPM78]|\x1b\][^\x07]*\x07")


def test_pace_halves_the_rate_while_full_and_steps_back_once_clear() -> None:
    pace = Pace()
    # interval 2 s: full for 2 s -> every 4 s; full for 4 more s -> every 8 s
    assert not pace.observe(True, 2.0, 0.0)
    assert not pace.observe(True, 2.0, 1.0)
    assert pace.observe(True, 2.0, 2.0) and pace.slowed(2.0) == 4.0
    assert not pace.observe(True, 2.0, 3.0)
    assert not pace.observe(True, 2.0, 6.0)
    assert pace.observe(True, 2.0, 7.0) and pace.slowed(2.0) == 8.0
    # one writable sample does not undo it; writable for CLEAR_SECONDS steps back once, then again
    assert not pace.observe(False, 2.0, 8.0)
    assert not pace.observe(True, 2.0, 9.0)
    assert not pace.observe(False, 2.0, 10.0)
    assert not pace.observe(False, 2.0, 10.0 + CLEAR_SECONDS - 1)
    assert pace.observe(False, 2.0, 10.0 + CLEAR_SECONDS) and pace.slowed(2.0) == 4.0
    assert not pace.observe(False, 2.0, 11.0 + CLEAR_SECONDS)  # the next clear stretch starts here
    assert pace.observe(False, 2.0, 11.0 + 2 * CLEAR_SECONDS) and pace.slowed(2.0) == 2.0
    assert not pace.observe(False, 2.0, 100.0)
    assert pace.changes == [2, 4, 2, 1]


def test_pace_stops_at_32_seconds() -> None:
    pace = Pace()
    now = 0.0
    for _ in range(200):
        pace.observe(True, 2.0, now)
        now += 1.0
    assert pace.slowed(2.0) == 32.0
    assert pace.changes == [2, 4, 8, 16]


class FakeTerminal:
    def __init__(self) -> None:
        self.full = False
        self.now = 0.0

    def ask(self) -> bool:
        return self.full

    def clock(self) -> float:
        return self.now


async def test_the_monitor_slows_down_says_so_and_the_users_interval_stays_remembered(
        tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    app = WorkbenchApp(None, start_mode="runs")
    app.refresh_seconds = None
    terminal = FakeTerminal()
    pace = app.terminal_pace = TerminalPace(app, full=terminal.ask, clock=terminal.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        monitor = await open_monitor(pilot, run.path, system_monitor=FixedSystem(run.path))
        assert monitor.poll_interval == 2.0 and monitor.sub_title == KEEP_GOING

        terminal.full = True
        for second in range(0, 8):  # every 4 s from 2 s on, every 8 s from 7 s on
            terminal.now = float(second)
            pace.sample()
        await pilot.pause()
        assert monitor.poll_interval == 8.0
        assert monitor.sub_title == "slow terminal: updating every 8 s"
        assert app.refresh_seconds is None  # the next monitor starts at the user's interval

        terminal.full = False
        for second in range(8, 8 + int(CLEAR_SECONDS) + 2):
            terminal.now = float(second)
            pace.sample()
        assert monitor.poll_interval == 4.0
        assert monitor.sub_title == "slow terminal: updating every 4 s"

        await pilot.press("i")  # the user's choice ends the slowing: 5 s, the next choice above 4 s
        terminal.now += 1.0
        pace.sample()
        await wait_for(pilot, lambda: monitor.sub_title == KEEP_GOING, what="the user's interval")
        assert monitor.poll_interval == 5.0 and pace.factor == 1


# -- the real thing: the app in a pseudo-terminal whose reader stops reading

APP = """
import sys
from pathlib import Path
import tui.app
from tui.app import WorkbenchApp

class App(WorkbenchApp):
    CSS_PATH = str(Path(tui.app.__file__).with_name("app.tcss"))

    def on_ready(self) -> None:
        super().on_ready()
        self.open_run(Path(sys.argv[1]))

App(None, start_mode="runs").run()
"""


def read_for(master: int, seconds: float, out: bytearray) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        os.set_blocking(master, False)
        try:
            out += os.read(master, 65536)
        except BlockingIOError:
            time.sleep(0.05)
        except OSError:  # EIO: the app ended and closed the terminal
            return


FULL_SECONDS = 6.0  # full through one pace step and into the next (interval 2 s: every 4 s, then 8 s)
FULL_BYTES = 4000  # Linux shows a master at most 4095 unread bytes however much more is held up behind them


def queued(master: int) -> int:
    """Bytes written to the terminal and not yet read (FIONREAD on the master: it reads nothing)."""
    return struct.unpack("i", fcntl.ioctl(master, termios.FIONREAD, b"\0" * 4))[0]


class FullFor:
    """True once the terminal has held the same FULL_BYTES or more, unread, for `seconds`: the app can
    write no more and has been waiting that long."""

    def __init__(self, master: int, seconds: float) -> None:
        self.master, self.seconds = master, seconds
        self.size, self.since = -1, time.monotonic()

    def __call__(self) -> bool:
        size = queued(self.master)
        if size != self.size:
            self.size, self.since = size, time.monotonic()
        return size >= FULL_BYTES and time.monotonic() - self.since >= self.seconds

    def describe(self) -> str:
        return f"{self.size} bytes unread, unchanged for {time.monotonic() - self.since:.1f} s"


def shown(out: bytearray) -> str:
    return ANSI.sub(b"", bytes(out)).decode("utf-8", errors="replace")


def test_a_terminal_that_stops_reading_slows_the_monitor_down_in_a_real_pty(
        tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    index.register(run.path)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
    script = tmp_path / "monitor_app.py"  # Textual reads an app's source file
    script.write_text(APP, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script), str(run.path)], stdin=slave, stdout=slave,
                               stderr=slave, env=env, cwd=REPO, start_new_session=True)
    os.close(slave)
    out = bytearray()
    try:
        # nobody reads: the runs list and the monitor's first paint (~50 KB) fill the pty's buffer, and the
        # app, blocked on a full terminal, must go on blocked for a while (its pace halves after 2 s full)
        full = FullFor(master, scaled(FULL_SECONDS))
        wait_until(full, 60, f"the app to fill the terminal and find it full for {FULL_SECONDS} s",
                   detail=full.describe)
        read_for(master, 3.0, out)
        assert process.poll() is None, f"the app ended ({process.returncode}):\n{shown(out)[-1500:]}"
        text = shown(out)
        slow = re.findall(r"slow terminal: updating every (\d+) s", text)
        assert slow, f"the header never said the terminal is slow:\n{text[-1500:]}"
        assert int(slow[-1]) >= 4
        # the reader keeps up again: one step back after CLEAR_SECONDS (4 s, or the user's 2 s)
        mark = len(out)
        deadline = time.monotonic() + scaled(CLEAR_SECONDS + 15)
        back = None
        while back is None and time.monotonic() < deadline:
            read_for(master, 1.0, out)
            later = shown(out[mark:])
            faster = [int(s) for s in re.findall(r"slow terminal: updating every (\d+) s", later)]
            # or the header is back to the run's own line (cut with an ellipsis when the title is long)
            if any(s < int(slow[-1]) for s in faster) or KEEP_GOING.split(" never")[0] in later:
                back = later
        assert back is not None, f"the header never stepped back:\n{shown(out[mark:])[-1500:]}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(master)
