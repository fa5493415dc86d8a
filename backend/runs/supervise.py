"""A training run as the one supervisor (backend.rundir.supervise) keeps it: command.json's argv, the
companions beside it (the watchdog, the events summary, the golden prompts keeper: each registered by its
own room at start-up, backend.cli.wiring), the end judged from the exit code and the evidence.

Entered as `python -m backend.cli.supervise run RUN_DIR` (backend.rundir.process.supervisor_argv).
"""

from __future__ import annotations

import signal
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import psutil

from backend.contract.save_request import RequestBlocked, write_save_request
from backend.core.process_identity import run_marker, start_time_of
from backend.rundir.layout import RunFolder, append_watch_log
from backend.rundir.process import find_trainer, is_trainer, pending_signals, signal_processes
from backend.rundir.supervise import Command, supervise
from backend.runs.verdict import judge_exit


class Companion(Protocol):
    """What runs beside the trainer while the supervisor keeps a run, told when the run has ended."""

    def finish(self) -> None: ...


@dataclass(frozen=True)
class CompanionKind:
    """A companion's name (said in watch.log when it cannot start) and how to start one for a run:
    (run, trainer pid) -> the companion, or None when this run needs none."""

    name: str
    start: Callable[[RunFolder, int], Companion | None]


COMPANIONS: list[CompanionKind] = []


def register_companion(kind: CompanionKind) -> None:
    """Registered once per process by the rooms that keep something beside a run (backend.cli.wiring)."""
    if all(known.name != kind.name for known in COMPANIONS):
        COMPANIONS.append(kind)


class RunKept:
    """A training run: command.json's argv; the registered companions beside it; the end judged from the
    exit code and the evidence (verdict.judge_exit)."""

    def __init__(self, run: RunFolder):
        self.run, self.marker = run, run_marker(run.path)
        self.companions: list[Companion] = []
        self._trainer: psutil.Process | None = None
        self._usr1_passed_on = False

    def record_keeper(self, **identity: object) -> bool:
        return self.run.update_state(**identity).stop_requested

    def intercept_signal(self, signum: int) -> bool:
        """SIGUSR1 (always) and SIGTERM (`[run] save_on_term`) become a "stop" save request: the trainer
        saves at the end of its step and stops (backend/contract/save_request.py). Any other: not taken.
        Called by the supervisor's main loop, never inside the handler (it reads and writes files)."""
        if signum == signal.SIGTERM and not self._save_on_term():
            return False
        try:
            write_save_request(self.run.path, "stop", signal.Signals(signum).name)
        except (OSError, RequestBlocked) as err:
            if signum != signal.SIGUSR1:
                return False  # SIGTERM then goes to the command as a plain stop
            # the request cannot be written (a full disk): SIGUSR1 to the trainer itself saves and stops too
            append_watch_log(self.run.path, f"SIGUSR1: the save request could not be written ({err}); "
                                            "passed SIGUSR1 on to the trainer")
            signal_processes(self._trainers(), signal.SIGUSR1)
        return True

    def _save_on_term(self) -> bool:
        try:
            return self.run.read_profile().run.save_on_term
        except (OSError, ValueError, AttributeError):
            return False

    def command(self) -> Command:
        command = self.run.read_command()
        return Command(command["argv"], command.get("cwd") or str(self.run.path))

    def started(self, child: subprocess.Popen[bytes]) -> None:
        state = self.run.read_state()
        started = start_time_of(child.pid)
        # the trainer until the real one is found (tick): the launcher, which does not act on SIGUSR1 (blocked)
        self.run.update_state(status="running", trainer_pid=child.pid, trainer_started=started,
                              launcher_pid=child.pid, launcher_started=started,
                              started_at=state.started_at or time.time())
        self.companions = [c for kind in COMPANIONS if (c := _start(kind, self.run, child.pid)) is not None]

    def tick(self, child: subprocess.Popen[bytes]) -> None:
        """Between the supervisor's looks: record the process that really trains once it exists (accelerate's
        launcher starts it), and pass on a SIGUSR1 that reached the launcher, which keeps it blocked."""
        if self._trainer is None:
            trainer = find_trainer(child.pid)
            if trainer is not None:
                self._trainer = trainer
                self.run.update_state(trainer_pid=trainer.pid, trainer_started=trainer.create_time())
        if not self._usr1_passed_on and signal.SIGUSR1 in pending_signals(child.pid):
            self._usr1_passed_on = True
            self.intercept_signal(signal.SIGUSR1)

    def _trainers(self) -> list[psutil.Process]:
        """The run's processes that train (each rank's swift process), not the launcher nor this one."""
        return [proc for proc in self.marker.processes() if is_trainer(proc)]

    def ended(self, code: int | None, stopped: bool, why_not_started: str | None = None) -> None:
        stop_requested = stopped or self.run.read_state().stop_requested
        if code is None:
            status = "failed" if why_not_started else "stopped"
            self.run.update_state(status=status, failure_reason=why_not_started, stop_requested=stop_requested,
                                  ended_at=time.time())
            return
        status, reason, sig = judge_exit(self.run, code, stop_requested=stop_requested)
        self.run.update_state(status=status, exit_code=code, signal=sig, failure_reason=reason,
                              stop_requested=stop_requested, ended_at=time.time())
        for companion in self.companions:  # after the final state: golden prompts answer what is left
            companion.finish()


def _start(kind: CompanionKind, run: RunFolder, trainer_pid: int) -> Companion | None:
    """One companion, or None; one that cannot start is said in watch.log and never stops the run."""
    try:
        return kind.start(run, trainer_pid)
    except Exception:
        append_watch_log(run.path, f"{kind.name} could not start\n{traceback.format_exc()}")
        return None


def supervise_run(run: RunFolder) -> int:
    return supervise(RunKept(run))
