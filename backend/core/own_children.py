"""Children this process started in a session of their own (`start_new_session=True`): the oracle's child,
the chat worker, a notification command.

Such a child's pid is its process group's id, and while its Popen is not reaped the pid cannot be given
to another process (a dead child stays a zombie until waited for): so the group is proven ours exactly
when `poll()` says the child has not been reaped. Every group signal to such a child goes through here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any


def signal_session(process: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to the child's whole session; False when it was already reaped (or the group is gone)."""
    if process.poll() is not None:
        return False
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_session(process: subprocess.Popen[Any], wait: float, *, name: str = "child") -> None:
    """SIGTERM to the session, then SIGKILL, `wait` seconds each; reaped here, or by a daemon thread when
    the kernel cannot take it yet (a disk in uninterruptible sleep), so this returns in about 2 x `wait`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not signal_session(process, sig):
            break
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        threading.Thread(target=process.wait, daemon=True, name=f"{name}-reap").start()
