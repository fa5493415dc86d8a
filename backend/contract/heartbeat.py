"""The trainer's signs of life, as the trainer writes them and the watchdog reads them (#15).

    <run>/watch/heartbeat          touched by the trainer at each step and evaluation batch (at most once a second)
    <run>/watch/stacks/<pid>.txt   each trainer process's stack dump file, registered with faulthandler on
                                   DUMP_SIGNAL (SIGRTMIN+3: SIGUSR1/2 mean "shut down" to SLURM setups,
                                   torch elastic and swift's elastic callback); the file proves the registration

Stdlib only: the trainer imports this (backend.plugin).
"""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path
from typing import IO

DUMP_SIGNAL: int = signal.SIGRTMIN + 3


def heartbeat_path(run_dir: Path) -> Path:
    """Touched by the trainer (at most once a second) at each step and evaluation batch."""
    return Path(run_dir) / "watch" / "heartbeat"


def stacks_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "watch" / "stacks"


def register_stack_dump(run_dir: Path) -> IO[str]:
    """Inside a trainer: dump every thread's stack to this process's file on DUMP_SIGNAL.
    The returned file must stay open for the life of the process."""
    folder = stacks_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / f"{os.getpid()}.txt", "w", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
    faulthandler.register(DUMP_SIGNAL, file=handle, all_threads=True, chain=False)
    return handle
