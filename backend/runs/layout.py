"""The run folder: the one place that knows what each file of a run is called.

    <run>/profile.toml          the profile as launched (snapshot)
    <run>/command.json          argv, environment (secrets redacted), cwd
    <run>/accelerate_config.yaml, deepspeed_config.json
    <run>/state.json            status, pids, times, exit code, failure reason (atomic replace)
    <run>/output.log            stdout+stderr of the training, written by the process itself
    <run>/events.jsonl          appended by the callback inside the trainer
    <run>/forecast.json         the memory planner's forecast at launch
    <run>/output/               swift's output_dir: checkpoints, logging.jsonl
    <run>/jobs/                 merge / inference jobs run on this run's checkpoints
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from backend.events import EVENTS_FILE_NAME
from backend.paths import data_dir
from backend.profile import LaunchProfile, load_profile, write_text_atomic

Status = Literal["starting", "running", "stopping", "finished", "failed", "stopped"]
ACTIVE_STATUSES: tuple[Status, ...] = ("starting", "running", "stopping")
FINAL_STATUSES: tuple[Status, ...] = ("finished", "failed", "stopped")


def workspace_dir() -> Path:
    """Where new run folders go; WORKBENCH_WORKSPACE chooses another place."""
    override = os.environ.get("WORKBENCH_WORKSPACE")
    return Path(override).expanduser().resolve() if override else data_dir() / "runs"


def preview_dir(profile_name: str) -> Path:
    """Folder that `workbench show` writes its configs into, so a printed line runs as is."""
    return workspace_dir() / "previews" / _slug(profile_name)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def new_run_id(profile_name: str) -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{_slug(profile_name)}-{secrets.token_hex(2)}"


class RunState(BaseModel):
    run_id: str
    profile_name: str
    status: Status = "starting"
    host: str = Field(default_factory=socket.gethostname)
    supervisor_pid: int | None = None
    pgid: int | None = None
    trainer_pid: int | None = None
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    failure_reason: str | None = None
    stop_requested: bool = False
    attempt: int = 1
    resumed_from: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


StateT = TypeVar("StateT", bound=BaseModel)


class StateFolder(Generic[StateT]):
    """What run and job folders share: `command.json`, `output.log` written by the process itself,
    and a `state.json` (a pydantic model) replaced atomically and updated under a lock."""

    state_model: type[StateT]

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    command_path = property(lambda self: self.path / "command.json")
    state_path = property(lambda self: self.path / "state.json")
    log_path = property(lambda self: self.path / "output.log")

    def read_state(self) -> StateT:
        return self.state_model.model_validate_json(self.state_path.read_text(encoding="utf-8"))

    def write_state(self, state: StateT) -> None:
        write_text_atomic(self.state_path, state.model_dump_json(indent=2))

    def update_state(self, **changes: Any) -> StateT:
        """Read-modify-write under a lock: the supervisor and a `stop` may update at once."""
        with open(self.path / ".state.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.read_state().model_copy(update=changes)
            self.write_state(state)
        return state

    def log_tail(self, max_bytes: int = 16_384) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - max_bytes))
                return handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""


class RunFolder(StateFolder[RunState]):
    """Paths and small reads/writes of one run folder."""

    state_model = RunState

    @property
    def run_id(self) -> str:
        return self.path.name

    profile_path = property(lambda self: self.path / "profile.toml")
    events_path = property(lambda self: self.path / EVENTS_FILE_NAME)
    forecast_path = property(lambda self: self.path / "forecast.json")
    jobs_dir = property(lambda self: self.path / "jobs")

    @property
    def output_dir(self) -> Path:
        command = self.read_command()
        return Path(command.get("output_dir") or self.path / "output")

    def exists(self) -> bool:
        return self.state_path.is_file()

    def read_command(self) -> dict[str, Any]:
        try:
            return json.loads(self.command_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def read_profile(self) -> LaunchProfile:
        return load_profile(self.profile_path)

    def checkpoints(self) -> list[Path]:
        """checkpoint-N folders of this run, by step."""
        folder = self.output_dir
        if not folder.is_dir():
            return []
        found = [p for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"checkpoint-\d+", p.name)]
        return sorted(found, key=lambda p: int(p.name.split("-")[1]))
