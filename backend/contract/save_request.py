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
import stat
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


class RequestBlocked(ValueError):
    """save.request cannot be written: something that is not a request file (a folder) sits in its place."""


def write_save_request(run_dir: Path, action: Action = "save", reason: str = SAVE_NOW) -> SaveRequest:
    """Ask the trainer of the run in `run_dir` to save (and, for "stop", then stop) at the end of its
    current step. A "stop" is never weakened by a later "save" still pending. RequestBlocked when the
    request's place holds something other than a file."""
    path = request_path(run_dir)
    if _present(path) and not _is_request_file(path):
        raise RequestBlocked(f"{path} is {_kind(path)}, not a request file, so the trainer cannot be asked through "
                             f"it; remove it (rm -r {path}) and ask again")
    pending = read_save_request(run_dir)
    if pending is not None and pending.action == "stop" and action == "save":
        return pending
    request = SaveRequest(action, reason, secrets.token_hex(4), time.time())
    write_text_atomic(path, json.dumps(request.__dict__))
    return request


def read_save_request(run_dir: Path) -> SaveRequest | None:
    """The pending request, or None: none, or a place that holds no request (a folder, a link, a file that is
    not a request's JSON: never taken as a save)."""
    path = request_path(run_dir)
    return _parse(path) if _is_request_file(path) else None


def take_save_request(run_dir: Path) -> SaveRequest | None:
    """The trainer's side, every step: None at the cost of one failed stat; else the request, taken by a
    rename (a request written meanwhile lands as a new file, taken at the next step: never lost)."""
    path = request_path(run_dir)
    if not _is_request_file(path):
        return None
    taken = path.with_name(f".{REQUEST_FILE}.taken-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        os.rename(path, taken)
    except OSError:
        return None  # gone meanwhile (taken by another reader, cleared)
    try:
        return _parse(taken)
    finally:
        _unlink(taken)


def clear_save_request(run_dir: Path) -> None:
    if _is_request_file(request_path(run_dir)):
        _unlink(request_path(run_dir))


MAX_REQUEST_BYTES = 65_536


def _parse(path: Path) -> SaveRequest | None:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(MAX_REQUEST_BYTES).decode("utf-8"))
        if not isinstance(data, dict) or data.get("action") not in ("save", "stop"):
            return None
        action: Action = data["action"]
        return SaveRequest(action, str(data.get("reason") or SAVE_NOW)[:200], str(data.get("id", "")),
                           float(data.get("time", 0.0)))
    except (OSError, ValueError, TypeError):
        return None


def _is_request_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _present(path: Path) -> bool:
    return os.path.lexists(path)


def _kind(path: Path) -> str:
    return "a symlink" if path.is_symlink() else "a folder" if path.is_dir() else "not a plain file"


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
