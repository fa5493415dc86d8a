"""Everything that touches a process: start detached, find a run's processes, signal, reap.

A run is started as `python -m backend.runs.supervise RUN_DIR` in a new session (its own
process group, no controlling terminal), stdin from /dev/null and output to the run's log
file, so a closed terminal, TUI or SSH link never reaches it. Every process of the run
inherits WORKBENCH_RUN_DIR; that marker finds them again even after torch elastic has put
its workers in sessions of their own or they were re-parented to init.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

RUN_MARKER_ENV = "WORKBENCH_RUN_DIR"


def start_detached(argv: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> int:
    """Start `argv` in a new session writing to `log_path`; return its pid (= its pgid)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv,
            cwd=str(cwd),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    # reap it when it ends, so a long-lived launcher (the TUI) keeps no zombie
    threading.Thread(target=process.wait, daemon=True, name=f"reap-{process.pid}").start()
    return process.pid


def supervisor_argv(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "backend.runs.supervise", str(run_dir)]


def is_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_processes(run_dir: Path, extra_pids: tuple[int | None, ...] = ()) -> list[psutil.Process]:
    """Live processes of a run: marked with its folder in their environment, or named."""
    wanted = str(Path(run_dir).resolve())
    found: dict[int, psutil.Process] = {}
    for pid in extra_pids:
        if is_alive(pid):
            found[pid] = psutil.Process(pid)  # type: ignore[arg-type]
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me or proc.pid in found:
            continue
        try:
            if proc.environ().get(RUN_MARKER_ENV) == wanted and proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = proc
        except psutil.Error:
            continue
    return list(found.values())


def signal_processes(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in processes:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def terminate_run(
    run_dir: Path,
    pids: tuple[int | None, ...],
    grace_seconds: float = 20.0,
    report: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """SIGINT, wait; SIGTERM, wait; SIGKILL. Returns what was done, one line a phase."""
    done: list[str] = []
    for sig, wait in ((signal.SIGINT, grace_seconds), (signal.SIGTERM, grace_seconds / 2), (signal.SIGKILL, 5.0)):
        processes = run_processes(run_dir, pids)
        if not processes:
            break
        signal_processes(processes, sig)
        line = f"sent {sig.name} to {len(processes)} process(es)"
        report(line)
        gone_all = _wait_gone(run_dir, pids, wait)
        done.append(line + (" - all exited" if gone_all else " - some still running"))
        if gone_all:
            break
    return done


def _wait_gone(run_dir: Path, pids: tuple[int | None, ...], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not run_processes(run_dir, pids):
            return True
        time.sleep(0.2)
    return not run_processes(run_dir, pids)
