"""Stack dumps of a run's Python processes, for a hang alert.

py-spy, when installed, reads any Python process from outside. Without it, every trainer process
registers `faulthandler` on a real-time signal (SIGRTMIN+3: SIGUSR1/2 mean "shut down" to SLURM
setups, torch elastic and swift's elastic callback) at start (the events callback calls
`register_stack_dump`), writing to `<run>/watch/stacks/<pid>.txt`; that file proves the
registration, so the signal (whose default action would kill) only goes to a process that created
its file after it started.
faulthandler's handler is C code: it dumps even while the main thread is blocked in a C call
(an NCCL wait), but not while the process is stopped (SIGSTOP, Ctrl-Z).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import psutil

from backend.contract.heartbeat import DUMP_SIGNAL, stacks_dir
from backend.core.tail import Tail


def _registered(run_dir: Path, proc: psutil.Process) -> Path | None:
    path = stacks_dir(run_dir) / f"{proc.pid}.txt"
    try:
        # a file left by an earlier process with the same pid is older than this process
        return path if path.stat().st_mtime >= proc.create_time() - 1 else None
    except (OSError, psutil.Error):
        return None


def dump_stacks(run_dir: Path, processes: list[psutil.Process], timeout: float = 3.0) -> dict[str, str]:
    """{pid: stack text or why there is none} for the run's processes that can be dumped."""
    if shutil.which("py-spy"):
        return {str(p.pid): _py_spy(p.pid, timeout) for p in processes if _is_python(p)}
    out: dict[str, str] = {}
    waiting: dict[int, tuple[Path, int]] = {}
    for proc in processes:
        path = _registered(run_dir, proc)
        if path is None:
            continue
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                out[str(proc.pid)] = "process is stopped (SIGSTOP / Ctrl-Z): no dump until it is continued"
                continue
            size = path.stat().st_size
            proc.send_signal(DUMP_SIGNAL)
            waiting[proc.pid] = (path, size)
        except (OSError, psutil.Error) as err:
            out[str(proc.pid)] = f"no dump: {err}"
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for pid, (path, size) in list(waiting.items()):
            text = _grown(path, size)
            if text and _looks_complete(path, size):
                out[str(pid)] = text
                del waiting[pid]
    for pid, (path, size) in waiting.items():
        out[str(pid)] = _grown(path, size) or "no dump within the time limit"
    return out


def _grown(path: Path, size: int) -> str:
    """What the dump file grew by after `size` (at most 200 kB)."""
    try:
        return Tail(path, size).read_text(200_000)
    except OSError:
        return ""


def _looks_complete(path: Path, size: int) -> bool:
    """faulthandler writes the dump in several writes: wait until it stops growing."""
    first = path.stat().st_size
    time.sleep(0.05)
    return path.stat().st_size == first > size


def _is_python(proc: psutil.Process) -> bool:
    try:
        return "python" in proc.name().lower() or "python" in " ".join(proc.cmdline()[:1]).lower()
    except psutil.Error:
        return False


def _py_spy(pid: int, timeout: float) -> str:
    try:
        result = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True,
                                timeout=max(timeout, 10.0))
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"py-spy failed: {err}"
    return result.stdout or f"py-spy failed: {result.stderr.strip()}"
