"""Everything that touches a process: start detached, prove which processes are a run's or a
job's, signal them, reap. Runs (`backend.runs`) and jobs (`backend.jobs`) both use this module.

A run is started as `python -m backend.cli.supervise run RUN_DIR` in a new session (its own
process group, no controlling terminal), stdin from /dev/null and output to the run's log
file, so a closed terminal, TUI or SSH link never reaches it. Every process of a run inherits
a marker in its environment (WORKBENCH_RUN_DIR=<the run folder>; jobs: WORKBENCH_JOB_DIR).

Proof of identity. A pid alone proves nothing: after a crash or a reboot the number is given to
another process, and a copied or hand-edited state.json names any pid at all. A process counts as
the run's (alive, or to be signalled) only when

- the record was made on this host and in this boot of it (host name and kernel boot id),
- the process with that pid started when the recorded one did (psutil create time), and
- its environment carries the run's marker (its own folder's path).

A process found by scanning counts only by its marker. A run recorded on another host is never
signalled from here: the caller is told where it runs. The same proof says when a supervisor is gone
(`keeper_gone`), for the one reconciler (reconcile.py) and the status line.
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

from backend.core.process_identity import (
    Marker,
    run_marker,
    start_time_of,
)


def start_detached(argv: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> tuple[int, float | None]:
    """Start `argv` in a new session writing to `log_path`; return its pid (= its pgid) and start time."""
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
    started = start_time_of(process.pid)  # before the reaper can let the pid go
    # reap it when it ends, so a long-lived launcher (the TUI) keeps no zombie
    threading.Thread(target=process.wait, daemon=True, name=f"reap-{process.pid}").start()
    return process.pid, started


def supervisor_argv(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "backend.cli.supervise", "run", str(run_dir)]


def signal_processes(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in processes:
        try:
            proc.send_signal(sig)  # psutil checks the pid still has the same start time
        except psutil.Error:
            pass


STOP_PHASES = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def terminate(
    marker: Marker,
    grace_seconds: float = 20.0,
    report: Callable[[str], None] = lambda _: None,
    phases: tuple[signal.Signals, ...] = STOP_PHASES,
) -> list[str]:
    """Signal every process carrying `marker`, phase by phase (default SIGINT, SIGTERM, SIGKILL),
    waiting after each for all to exit. Returns what was done, one line a phase."""
    done: list[str] = []
    waits = {signal.SIGINT: grace_seconds, signal.SIGTERM: grace_seconds / 2, signal.SIGKILL: 5.0}
    for sig in phases:
        processes = marker.processes()
        if not processes:
            break
        signal_processes(processes, sig)
        line = f"sent {sig.name} to {len(processes)} process(es)"
        report(line)
        gone_all = wait_gone(marker, waits.get(sig, grace_seconds))
        done.append(line + (" - all exited" if gone_all else " - some still running"))
        if gone_all:
            break
    return done


def terminate_run(
    run_dir: Path,
    pids: tuple[int | None, ...] = (),
    grace_seconds: float = 20.0,
    report: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """SIGINT, wait; SIGTERM, wait; SIGKILL to the run's marked processes (`pids` are not trusted)."""
    return terminate(run_marker(run_dir), grace_seconds, report)


def wait_gone(marker: Marker, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not marker.processes():
            return True
        time.sleep(0.2)
    return not marker.processes()


def is_trainer(proc: psutil.Process) -> bool:
    """A process that trains: swift's entry point (`-m swift.cli.<task>`), not a launcher running it."""
    try:
        line = proc.cmdline()
    except psutil.Error:
        return False
    return any(word.startswith("swift.cli.") for word in line) and "accelerate.commands.launch" not in line \
        and not any("torch.distributed.run" in word or word.endswith("torchrun") for word in line)


def find_trainer(launcher_pid: int) -> psutil.Process | None:
    """The training process under a run's launcher: local rank 0's swift process when there are several (the
    one rank 0 of this machine), or None while it is not started yet."""
    try:
        below = psutil.Process(launcher_pid).children(recursive=True)
    except psutil.Error:
        return None
    found = [proc for proc in below if is_trainer(proc)]

    def rank_of(proc: psutil.Process) -> int:
        try:
            value = proc.environ().get("LOCAL_RANK", "0")
        except psutil.Error:
            return 1 << 30
        return int(value) if value.isdigit() else 1 << 30

    return min(found, key=lambda proc: (rank_of(proc), proc.pid), default=None)


def pending_signals(pid: int) -> set[int]:
    """The signals pending (blocked, not yet delivered) at a process of this host, from /proc; empty when it
    cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, ValueError, IndexError):
        return set()
    mask = 0
    for value in masks:
        mask |= value
    return {n for n in range(1, 65) if mask & (1 << (n - 1))}
