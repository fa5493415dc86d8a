"""The trainer's signs of life, as the trainer writes them and the watchdog reads them (#15).

    <run>/watch/heartbeat          touched by the trainer at each step and evaluation batch (at most once a second)
    <run>/watch/ranks/<rank>.json  each rank's step and place, for a hang report by rank (#39; below)
    <run>/watch/stacks/<pid>.txt   each trainer process's stack dump file, registered with faulthandler on
                                   DUMP_SIGNAL (SIGRTMIN+3: SIGUSR1/2 mean "shut down" to SLURM setups,
                                   torch elastic and swift's elastic callback); the file proves the registration

Stdlib only: the trainer imports this (backend.plugin).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
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


# ---------------------------------------------------------------- per rank (#39)
#
#   <run>/watch/ranks/<rank>.json   each rank's place: {"rank", "pid", "host", "step", "where", "since"}, rewritten
#                                   in place (one pwrite, padded to RANK_RECORD_BYTES) at each step's begin and end,
#                                   at a save, and (at most once a second) during evaluation; its mtime is the
#                                   rank's last sign of life, `step` the step it is in or last finished.

RANK_RECORD_BYTES = 512
RANK_PLACES = ("step", "after_step", "eval", "save")  # `where`: in step N / N done / evaluating / N saved


@dataclass(frozen=True)
class RankProgress:
    rank: int
    pid: int
    host: str
    step: int
    where: str
    since: float
    time: float  # when the record was read: the file's mtime (the rank's last sign of life)

    def place(self) -> str:
        """"in step 7", "after step 6", "evaluating after step 6", "saved checkpoint-6\""""
        return {"step": f"in step {self.step}", "after_step": f"after step {self.step}",
                "eval": f"evaluating after step {self.step}", "save": f"saved checkpoint-{self.step}"}.get(
                    self.where, f"{self.where} at step {self.step}")


def ranks_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "watch" / "ranks"


class RankProgressWriter:
    """Inside a trainer: this rank's record, one pwrite per call (no rename, no fsync: a sign of life)."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self.rank = rank
        self._fd: int | None = None
        self._last: tuple[int, str] | None = None
        self._last_time = 0.0  # when the place `_last` began
        self._written = 0.0
        try:
            folder = ranks_dir(run_dir)
            folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(folder / f"{rank}.json", os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError:  # a read-only run folder: no per-rank progress, training goes on
            self._fd = None

    def at(self, step: int, where: str, *, throttle: bool = False) -> None:
        now = time.time()
        if throttle and (step, where) == self._last and now - self._written < 1.0:
            return
        if self._fd is None:
            return
        since = self._last_time if (step, where) == self._last else now
        record = json.dumps({"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "step": step,
                             "where": where, "since": since}).encode("utf-8")
        try:
            os.pwrite(self._fd, record.ljust(RANK_RECORD_BYTES, b" ")[:RANK_RECORD_BYTES], 0)
        except OSError:
            return
        self._written = now
        if (step, where) != self._last:
            self._last, self._last_time = (step, where), now


def read_rank_progress(run_dir: Path) -> dict[int, RankProgress]:
    """Every rank's record that reads whole ({} before the trainers started); a torn or foreign file is skipped."""
    found: dict[int, RankProgress] = {}
    try:
        paths = sorted(ranks_dir(run_dir).glob("*.json"))
    except OSError:
        return found
    for path in paths:
        try:
            mtime = path.stat().st_mtime
            data = json.loads(path.read_bytes()[:RANK_RECORD_BYTES].decode("utf-8"))
            progress = RankProgress(rank=int(data["rank"]), pid=int(data["pid"]), host=str(data["host"]),
                                    step=int(data["step"]), where=str(data["where"]), since=float(data["since"]),
                                    time=mtime)
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            continue
        found[progress.rank] = progress
    return found
