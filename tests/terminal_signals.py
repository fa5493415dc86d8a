"""Signals as a terminal's shell gives them to the jobs it starts: SIGINT, SIGQUIT and SIGHUP at their default.

A test that sends one of these to a process it started must start it so: pytest itself may run with them
ignored (started in the background of a script, `.ci/run &`, or under nohup), and an ignored signal stays
ignored across fork and exec. Use as `subprocess.Popen(..., preexec_fn=default_terminal_signals)`.
"""

from __future__ import annotations

import signal


def default_terminal_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
