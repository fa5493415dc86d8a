"""A TUI whose terminal is gone ends itself.

When the other side of the terminal closes (sshd ends the session, the emulator window is closed)
and no SIGHUP reaches the app - it is not that terminal's session leader or in its foreground,
e.g. started by a script in a pseudo-terminal - every read of the terminal returns at once with
nothing, and Textual's input thread makes that a busy loop: a `workbench` left behind by a closed
pty was seen spinning at 75 % of a core for an hour. A hung-up terminal answers termios requests
with EIO; the app asks every few seconds and exits when it does. Runs are unaffected: they never
depended on the TUI.
"""

from __future__ import annotations

import errno
import logging
import termios

from textual.app import App

from tui.terminal_pace import terminal_fd

CHECK_SECONDS = 5.0
log = logging.getLogger("workbench.tui")


def terminal_hung_up(fd: int) -> bool:
    """True when the terminal behind `fd` was hung up (its other side is gone)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as err:
        return bool(err.args) and err.args[0] == errno.EIO
    except OSError as err:
        return err.errno == errno.EIO
    return False


def exit_when_the_terminal_is_gone(app: App) -> None:
    """The app's hook (not for headless apps, which have no terminal)."""
    fd = None if app.is_headless else terminal_fd()
    if fd is None:
        return

    def check() -> None:
        if terminal_hung_up(fd):
            log.warning("the terminal was hung up: the TUI exits (runs go on)")
            app.exit(return_code=1)

    app.set_interval(CHECK_SECONDS, check)
