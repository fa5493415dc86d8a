"""The one supervisor: keeper of a run or a job, session leader, parent of its command.

    python -m backend.cli.supervise run RUN_DIR    a run: backend.runs.supervise's RunKept plugged in
    python -m backend.cli.supervise job JOB_DIR    a job: backend.jobs.supervise's JobKept plugged in
    python -m backend.cli.supervise slurm RUN_DIR  a run inside its SLURM batch job (backend.launchers.slurm)

It is started detached (process.start_detached: a new session, stdin from /dev/null, output to the
folder's log, the folder's marker in its environment) and does, for every kind, in this order:

1. signal handlers first: SIGHUP and SIGINT are ignored (only a stop, which signals every process of
   the folder, or the command's end ends it); a SIGTERM is passed on to the command, and one that
   comes before the command exists is remembered and delivered right after it starts (never lost).
   A handler only notes the signal: the main loop acts on it (a kind's `intercept_signal` writes files,
   and an error there, a full disk, must not end the supervisor while its command runs on);
2. records who keeps the folder (host, boot, pid + start time), unless a stop came first;
3. starts the kind's command, with SIGUSR1 blocked (inherited through exec: a launcher, accelerate's or
   torch elastic's, whose default action would be to die, never acts on it; the trainer lets it in on a thread
   of its own once its handler is installed, so what it starts from its main thread, a spawned DataLoader
   worker included, keeps it blocked; one sent before then waits for it), and waits for it, calling the kind's
   `tick` between looks (a run finds its real trainer process);
4. waits for the stragglers that carry the folder's marker (torch elastic's workers sit in sessions
   of their own) and kills those left after a grace time;
5. lets the kind record the outcome. The final state is written before this process exits: the
   reconciler (reconcile.py) concludes "lost" only once this process is proven gone, then reads
   state.json again.

No torch in this process (numpy, for the events summary, at most).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from backend.core.process_identity import Marker, current_boot_id, start_time_of, this_host
from backend.rundir.process import signal_processes

STRAGGLER_SECONDS = 30.0
POLL_SECONDS = 0.25  # how soon a noted signal is acted on, and the kind's tick


@dataclass(frozen=True)
class Command:
    """What the supervisor starts: argv, working folder, variables added to its own environment."""

    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)


class Kept(Protocol):
    """What one kind of folder (a run, a job) plugs into the supervisor."""

    marker: Marker

    def record_keeper(self, **identity: object) -> bool:
        """Write the supervisor's identity into the state; True when a stop was asked already."""
        ...

    def command(self) -> Command: ...

    def started(self, child: subprocess.Popen[bytes]) -> None:
        """The command runs: record its pid and start time, start the kind's helpers."""
        ...

    def ended(self, code: int | None, stopped: bool, why_not_started: str | None = None) -> None:
        """Record how it ended and finish or clean up. `code` None: never started, because a stop was
        asked (`stopped`: in the state, or a SIGTERM came) or for `why_not_started`."""
        ...


class SignalRelay:
    """SIGTERM to the supervisor goes to its command, also when it comes before the command exists.
    `intercept` (a run's save on signal, #27) may take a SIGTERM or SIGUSR1 instead (True: taken).
    The handler only notes the signal; `act`, called by the main loop, does the rest."""

    def __init__(self, intercept: Callable[[int], bool] | None = None) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: int | None = None
        self.received = False
        self.intercept = intercept
        self.noted: list[int] = []

    def install(self) -> SignalRelay:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_signal)
        # SIGUSR1 would end the supervisor by default: ignored unless the kind takes it
        signal.signal(signal.SIGUSR1, self._on_signal if self.intercept else signal.SIG_IGN)
        return self

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.noted.append(signum)  # no I/O here: `act` (the main loop) does it

    def act(self) -> None:
        """Act on the signals noted since the last call: the kind's intercept, else SIGTERM passed on."""
        while self.noted:
            signum = self.noted.pop(0)
            if self.intercept is not None and self._intercepted(signum):
                continue
            if signum != signal.SIGTERM:
                continue
            self.received = True
            if self.child is None:
                self.pending = signum  # delivered by `attach` once the command has started
            elif self.child.poll() is None:
                self.child.send_signal(signum)

    def _intercepted(self, signum: int) -> bool:
        assert self.intercept is not None
        try:
            return self.intercept(signum)
        except Exception:  # the kind's own failure: said in the log, the signal then goes its plain way
            print(f"workbench supervisor: acting on {signal.Signals(signum).name} failed:\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)
            return False

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.act()
        pending, self.pending = self.pending, None
        if pending is not None and child.poll() is None:
            child.send_signal(pending)


def supervise(kept: Kept) -> int:
    """Keep one folder's command from start to recorded end (the module's docstring says how)."""
    relay = SignalRelay(getattr(kept, "intercept_signal", None)).install()
    stop_asked = kept.record_keeper(host=this_host(), boot_id=current_boot_id(), supervisor_pid=os.getpid(),
                                    supervisor_started=start_time_of(os.getpid()))
    relay.act()
    if stop_asked or relay.received:  # stopped before it began: nothing is started
        kept.ended(None, stopped=True)
        return 0
    try:
        child = _spawn(kept.command())
    except (OSError, ValueError, KeyError, TypeError) as err:  # no such program, a damaged command.json
        kept.ended(None, stopped=False, why_not_started=f"its command could not be started: {err}")
        return 0
    relay.attach(child)
    kept.started(child)
    code = _wait(child, relay, getattr(kept, "tick", None))
    wait_for_stragglers(kept.marker)
    kept.ended(code, relay.received)
    return 0


def _wait(child: subprocess.Popen[bytes], relay: SignalRelay,
          tick: Callable[[subprocess.Popen[bytes]], None] | None) -> int:
    """The command's exit code; meanwhile the signals noted are acted on and the kind's `tick` is called."""
    while True:
        relay.act()
        if tick is not None:
            try:
                tick(child)
            except Exception:  # a look that failed is tried again at the next tick; the command runs on
                print(f"workbench supervisor: tick failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        try:
            return child.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            continue


def _spawn(command: Command) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command.argv, cwd=command.cwd, env={**os.environ, **command.env},
                            stdin=subprocess.DEVNULL,
                            preexec_fn=_child_signals)


def _child_signals() -> None:
    """In the command before exec: default SIGINT handling back (SIGHUP stays ignored), SIGUSR1 blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def wait_for_stragglers(marker: Marker, timeout: float = STRAGGLER_SECONDS) -> None:
    """The command can exit a moment before its own children: the final state is written only once
    no process carrying the marker is left (those left after `timeout` are killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not marker.processes():
            return
        time.sleep(0.2)
    signal_processes(marker.processes(), signal.SIGKILL)
