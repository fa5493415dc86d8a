"""Save on demand (#27): how the workbench asks a running trainer for a checkpoint now.

The ask is a file, `<run>/save.request` (JSON: action "save" or "stop", reason, id, time), written
atomically into the run folder. The callback inside the trainer (backend/plugin/workbench_callback.py)
looks for it at the end of every optimizer step (one stat of a path: microseconds), takes it (deletes
it) and sets `control.should_save` (and, for "stop", `control.should_training_stop`): the checkpoint
is written at the end of the current step and its Checkpoint event says `requested` = the reason. A
file works wherever the run folder is seen (a SLURM job on another node included) and needs no pid.
With several processes, rank 0 reads the file and every rank learns it through one small all-reduce
per step, so all save at the same step.

Signals go the same way: SIGUSR1 to a trainer process saves then stops (always); SIGTERM does when the
profile says `[run] save_on_term = true`; SIGUSR1 to the run's supervisor writes a "stop" request.

Stdlib + backend.core.fs only: the training process imports this.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.core.fs import write_text_atomic

REQUEST_FILE = "save.request"
SAVE_NOW = "save now"
Action = Literal["save", "stop"]


@dataclass(frozen=True)
class SaveRequest:
    action: Action
    reason: str
    id: str = ""
    time: float = 0.0


def request_path(run_dir: Path) -> Path:
    return Path(run_dir) / REQUEST_FILE


def write_save_request(run_dir: Path, action: Action = "save", reason: str = SAVE_NOW) -> SaveRequest:
    """Ask the trainer of the run in `run_dir` to save (and, for "stop", then stop) at the end of its
    current step. A "stop" is never weakened by a later "save" still pending."""
    pending = read_save_request(run_dir)
    if pending is not None and pending.action == "stop" and action == "save":
        return pending
    request = SaveRequest(action, reason, secrets.token_hex(4), time.time())
    write_text_atomic(request_path(run_dir), json.dumps(request.__dict__))
    return request


def read_save_request(run_dir: Path) -> SaveRequest | None:
    """The pending request, or None (none, or a file that is not one: that is taken as a plain save)."""
    try:
        raw = request_path(run_dir).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        data = json.loads(raw)
        action: Action = "stop" if data.get("action") == "stop" else "save"
        return SaveRequest(action, str(data.get("reason") or SAVE_NOW)[:200], str(data.get("id", "")),
                           float(data.get("time", 0.0)))
    except (ValueError, TypeError, AttributeError, KeyError):
        return SaveRequest("save", SAVE_NOW)


def take_save_request(run_dir: Path) -> SaveRequest | None:
    """The trainer's side, every step: None at the cost of one failed stat; else the request, removed."""
    path = request_path(run_dir)
    if not os.path.exists(path):
        return None
    request = read_save_request(run_dir) or SaveRequest("save", SAVE_NOW)
    clear_save_request(run_dir)
    return request


def clear_save_request(run_dir: Path) -> None:
    try:
        request_path(run_dir).unlink()
    except OSError:
        pass

