"""Save on demand and on signal (#27, backend/contract/save_request.py) inside swift's training process (loaded by
workbench_callback.py): at the end of every step, `<run>/save.request` (one stat) and a signal caught since the
last step (SIGUSR1 always, SIGTERM when the profile says `[run] save_on_term = true`). With several ranks one
all-reduce per step makes every rank save at the same step (a signal may reach one rank only)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import torch

from backend.contract.save_request import take_save_request

# the save asks as the ranks agree on them (the largest wins): a save, a stop asked through the request file,
# SIGTERM (with [run] save_on_term) and SIGUSR1 caught by one rank
SIGNAL_CODES = {"SIGTERM": 3, "SIGUSR1": 4}
CODE_REASONS = {1: "save now", 2: "stop asked (save.request)", 3: "SIGTERM", 4: "SIGUSR1"}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def accept_usr1_on_own_thread() -> None:
    """Let SIGUSR1 in through one thread of its own; the main thread keeps it blocked.

    The supervisor starts every process of the run with SIGUSR1 blocked (backend/rundir/supervise.py), and a
    process started from the main thread inherits that mask, through exec too: a DataLoader worker of the
    `spawn` or `forkserver` context (a fresh interpreter, SIGUSR1's default action: die) or a helper process
    keeps it blocked, so `kill -USR1 -- -PGID` or `scancel --signal=USR1` leaves them alone. The kernel gives
    a signal sent to the process to the one thread that does not block it; Python runs the handler on the main
    thread as always. One sent before this handler existed has waited, and is delivered now."""
    def listen() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        threading.Event().wait()

    threading.Thread(target=listen, name="workbench-sigusr1", daemon=True).start()


class SaveAsks:
    """The asks for a checkpoint now: `requested` says why the checkpoint being saved was asked for,
    `stop_reason` why the run stops after it (None: it goes on)."""

    def __init__(self, run_dir: Path, profile: dict[str, Any]) -> None:
        self._run_dir = run_dir
        self._signalled: str | None = None  # the signal caught since the last step end ("SIGUSR1", "SIGTERM")
        self.requested: str | None = None
        self.stop_reason: str | None = None
        names = ["SIGUSR1"] + (["SIGTERM"] if profile.get("run", {}).get("save_on_term") is True else [])
        for name in names:
            try:
                signal.signal(getattr(signal, name), self._on_signal)
            except (ValueError, OSError):  # not the main thread: the request file still works
                continue
            if name == "SIGUSR1":
                accept_usr1_on_own_thread()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signalled = signal.Signals(signum).name  # acted on at the end of the current step

    def _pending(self, accelerator: Any) -> tuple[int, str | None]:
        """(0 nothing, 1 save, 2 or more: save and stop) and why, agreed by every rank: the largest code of
        any rank wins, and a rank that did not see the ask itself takes the reason from the code."""
        code, reason = 0, None
        if self._signalled is not None:
            reason, self._signalled = self._signalled, None
            code = SIGNAL_CODES.get(reason, 2)
        elif rank() == 0:
            request = take_save_request(self._run_dir)
            if request is not None:
                code, reason = (2 if request.action == "stop" else 1), request.reason
        if accelerator.num_processes > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            agreed = torch.tensor([code], dtype=torch.int64, device=accelerator.device)
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            if int(agreed.item()) != code:
                code = int(agreed.item())
                reason = CODE_REASONS.get(code, "asked on another rank")
        return code, reason

    def take(self, accelerator: Any, control: Any) -> None:
        """At a step's end: a pending ask sets `control.should_save` (and `should_training_stop` for a stop)."""
        code, reason = self._pending(accelerator)
        if code == 0:
            return
        control.should_save = True
        self.requested = reason
        if code >= 2:
            control.should_training_stop = True
            self.stop_reason = f"saved and stopped on {reason}" if reason and reason.startswith("SIG") else \
                f"saved and stopped: {reason}"
