"""The run folder: the one place that knows what each file of a run is called.

    <run>/profile.toml          the profile as launched (snapshot)
    <run>/command.json          argv, environment (secrets redacted), cwd
    <run>/accelerate_config.yaml, deepspeed_config.json
    <run>/state.json            status, pids, times, exit code, failure reason (atomic replace)
    <run>/output.log            stdout+stderr of the training, written by the process itself
    <run>/events.jsonl          appended by the callback inside the trainer
    <run>/forecast.json         the memory planner's forecast at launch
    <run>/world.json            the world shape and the hashes of config.json and the data at launch (world.py)
    <run>/save.request          a checkpoint asked for, taken by the trainer at its next step end (save.py)
    <run>/output/               swift's output_dir: checkpoints, logging.jsonl
    <run>/jobs/                 merge / inference jobs run on this run's checkpoints
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from backend.contract.events import EVENTS_FILE_NAME
from backend.core import process_identity as identity
from backend.core.fs import LockTimeout, file_lock, write_text_atomic
from backend.core.paths import workspace_dir
from backend.core.process_identity import current_boot_id, this_host
from backend.core.tail import last_lines, lines_before
from backend.profile import LaunchProfile, load_profile
from backend.rundir.checkpoint_verdict import (
    CheckpointVerdict,
    checkpoint_folders,
    judge_checkpoint,
)
from backend.rundir.world import WORLD_FILE, read_world

# unknown: the processes are gone and nothing proves how it ended; damaged: state.json unreadable
Status = Literal["starting", "running", "stopping", "finished", "failed", "stopped", "unknown", "damaged"]
ACTIVE_STATUSES: tuple[Status, ...] = ("starting", "running", "stopping")
FINAL_STATUSES: tuple[Status, ...] = ("finished", "failed", "stopped")
# unknown: every process of the run is proven gone with no record of how it ended (a crash, a reboot)
RESUMABLE_STATUSES: tuple[Status, ...] = ("stopped", "failed", "unknown")
IDENTITY_FILE = "run.json"  # written once when the folder is made: what makes a folder a run folder
IDENTITY_KIND = "finetune-workbench run"
MAX_STATE_BYTES = 1_000_000  # a state.json is a few hundred bytes; anything huge is not one


# a time (unix seconds) or pid read from a file: finite and in range, or the file is damaged
Moment = Annotated[float, Field(allow_inf_nan=False, ge=0)]
Pid = Annotated[int, Field(ge=1, le=2**31 - 1)]


class ProcessFields(BaseModel):
    """What run and job states share about their processes: where they were started and the
    supervisor's identity (pid + start time). Subclasses add their child (trainer / job command).
    Proof of identity is backend/core/process_identity.py's."""

    host: str = Field(default_factory=this_host)
    boot_id: str | None = None  # None: recorded by an older workbench, the boot cannot be checked
    supervisor_pid: Pid | None = None
    supervisor_started: Moment | None = None

    def elsewhere(self) -> str | None:
        """Why this record's processes cannot be signalled from here (another host, an earlier
        boot of this one), or None."""
        return identity.elsewhere(self.host, self.boot_id)

    def on_other_host(self) -> bool:
        return self.host != this_host()

    def before_reboot(self) -> bool:
        """Recorded here in an earlier boot: every process it names is gone, its pids are others' now."""
        return not self.on_other_host() and self.boot_id is not None and self.boot_id != current_boot_id()

    def keeper_gone(self, marker: identity.Marker) -> bool:
        """Whether its supervisor is proven gone (process_identity.keeper_gone)."""
        return identity.keeper_gone(marker, self.host, self.boot_id, self.supervisor_pid, self.supervisor_started)


class StateUnreadable(ValueError):
    """state.json is missing, empty, not JSON, not UTF-8, too large or has wrong-typed fields."""


class FolderBusy(ValueError):
    """Another workbench command is starting, stopping, resuming or deleting this run right now."""


class FolderNotWritable(ValueError):
    """The run folder cannot be written (read-only, permissions, disk full)."""


def preview_dir(profile_name: str) -> Path:
    """Folder that `workbench show` writes its configs into, so a printed line runs as is."""
    return workspace_dir() / "previews" / _slug(profile_name)


MAX_SLUG_CHARS = 60  # a folder name is at most 255 bytes; a run id stays readable


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:MAX_SLUG_CHARS].strip("-.") or "run"


def new_run_id(profile_name: str) -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{_slug(profile_name)}-{secrets.token_hex(2)}"


class RunState(ProcessFields):
    run_id: str
    profile_name: str
    status: Status = "starting"
    pgid: Pid | None = None
    trainer_pid: Pid | None = None  # the process that trains (local rank 0's); the launcher's until it is found
    trainer_started: Moment | None = None
    launcher_pid: Pid | None = None  # the command the supervisor started (accelerate's launcher)
    launcher_started: Moment | None = None
    created_at: Moment = Field(default_factory=time.time)
    started_at: Moment | None = None
    ended_at: Moment | None = None
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
        """The state; StateUnreadable (with the reason, naming the file) when it cannot be read."""
        return read_model(self.state_path, self.state_model)

    def write_state(self, state: StateT) -> None:
        try:
            write_text_atomic(self.state_path, state.model_dump_json(indent=2))
        except OSError as err:
            raise FolderNotWritable(f"cannot write {self.state_path}: {err.strerror or err}") from err

    def update_state(self, **changes: Any) -> StateT:
        """Read-modify-write under a lock: the supervisor and a `stop` may update at once."""
        with self._flock(".state.lock", wait=None):
            state = self.read_state().model_copy(update=changes)
            self.write_state(state)
        return state

    @contextlib.contextmanager
    def control(self, what: str = "change", wait: float | None = 10.0) -> Iterator[None]:
        """Hold the folder's controller lock: one start / stop / resume / delete at a time, across
        its check and its act. FolderBusy when another command holds it longer than `wait` s."""
        with self._flock(".control.lock", wait=wait, what=what):
            yield

    @contextlib.contextmanager
    def _flock(self, name: str, wait: float | None, what: str = "change") -> Iterator[None]:
        held = False
        try:
            with file_lock(self.path / name, wait=wait):
                held = True
                yield
        except OSError as err:
            if held:  # the caller's own error, not the lock's
                raise
            raise FolderNotWritable(f"cannot {what} {self.path}: the folder is not writable "
                                    f"({err.strerror or err})") from err
        except LockTimeout:
            raise FolderBusy(f"another workbench command is controlling {self.path.name} right "
                             f"now (start, stop, resume or delete); try again when it is done") from None

    def numbered_log_tail(self, max_bytes: int = 65_536) -> tuple[str, int]:
        """The log's last whole lines (at most `max_bytes`) and the line number of the first one."""
        window = last_lines(self.log_path, max_bytes)
        return window.text, lines_before(self.log_path, window.start) + 1

    def log_tail(self, max_bytes: int = 16_384) -> str:
        """The log's last whole lines (at most `max_bytes`)."""
        return last_lines(self.log_path, max_bytes).text


def read_model(path: Path, model: type[StateT]) -> StateT:
    """A pydantic model from a JSON file, or StateUnreadable saying what is wrong with which file."""
    try:
        size = path.stat().st_size
        if size > MAX_STATE_BYTES:
            raise StateUnreadable(f"{path.name}: {size:,} bytes, too large to be a state file")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise StateUnreadable(f"{path.name} is missing") from None
    except OSError as err:
        raise StateUnreadable(f"{path.name}: cannot be read ({err.strerror or err})") from None
    if not raw.strip():
        raise StateUnreadable(f"{path.name} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise StateUnreadable(f"{path.name}: not UTF-8 text (byte {err.start})") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(the whole file)"
        kind = "not JSON" if first["type"] == "json_invalid" else f"field {where}"
        raise StateUnreadable(f"{path.name}: {kind}: {first['msg']}") from None


class RunIdentity(BaseModel):
    """`run.json`: written once, when the workbench makes the folder. A folder is a run folder
    (listable, deletable) only when this file is there and names the folder."""

    kind: str
    run_id: str
    created_at: float
    host: str


class RunFolder(StateFolder[RunState]):
    """Paths and small reads/writes of one run folder."""

    state_model = RunState

    @property
    def run_id(self) -> str:
        return self.path.name

    identity_path = property(lambda self: self.path / IDENTITY_FILE)

    @classmethod
    def create(cls, parent: Path, run_id: str) -> RunFolder:
        """Make a new run folder (never an existing one) and write its identity file."""
        folder = Path(parent) / run_id
        try:
            folder.mkdir(parents=True)
            cls(folder).write_identity()
        except FileExistsError:
            raise
        except OSError as err:
            with contextlib.suppress(OSError):
                if folder.is_dir() and not any(p for p in folder.iterdir() if p.name != IDENTITY_FILE):
                    (folder / IDENTITY_FILE).unlink(missing_ok=True)
                    folder.rmdir()
            raise FolderNotWritable(f"cannot create the run folder {folder}: {err.strerror or err}") from err
        return cls(folder)

    def write_identity(self) -> None:
        """Write run.json (once: an existing one is kept)."""
        if self.identity_path.exists():
            return
        identity = RunIdentity(kind=IDENTITY_KIND, run_id=self.run_id, created_at=time.time(), host=this_host())
        write_text_atomic(self.identity_path, identity.model_dump_json(indent=2))

    def identity_problem(self) -> str | None:
        """Why this folder is not provably a workbench run folder, or None when it is."""
        if not self.path.is_dir():
            return f"{self.path} is not a folder"
        try:
            identity = read_model(self.identity_path, RunIdentity)
        except StateUnreadable as err:
            return f"{self.path} is not a workbench run folder ({err})"
        if identity.kind != IDENTITY_KIND or identity.run_id != self.path.name:
            return (f"{self.path} is not a workbench run folder ({IDENTITY_FILE} names run "
                    f"{identity.run_id!r}, not this folder)")
        return None

    def is_proven(self) -> bool:
        return self.identity_problem() is None

    def state_or_damaged(self) -> RunState:
        """The state, or a stand-in with status `damaged` and the reason, when it cannot be read."""
        try:
            return self.read_state()
        except StateUnreadable as err:
            created = _mtime(self.identity_path) or _mtime(self.path) or 0.0
            return RunState(run_id=self.run_id, profile_name="?", status="damaged", created_at=created,
                            failure_reason=f"damaged: {err}")

    def new_state(self, profile_name: str) -> RunState:
        return RunState(run_id=self.run_id, profile_name=profile_name, boot_id=current_boot_id())

    profile_path = property(lambda self: self.path / "profile.toml")
    events_path = property(lambda self: self.path / EVENTS_FILE_NAME)
    forecast_path = property(lambda self: self.path / "forecast.json")
    jobs_dir = property(lambda self: self.path / "jobs")

    @property
    def output_dir(self) -> Path:
        output = self.read_command().get("output_dir")
        return Path(output) if isinstance(output, str) and output else self.path / "output"

    def exists(self) -> bool:
        """A run folder: its identity file, or (older workbench) its state.json."""
        return self.identity_path.is_file() or self.state_path.is_file()

    def read_command(self) -> dict[str, Any]:
        """command.json, or {} when it is missing or damaged (callers that need it say so)."""
        try:
            command = json.loads(self.command_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return command if isinstance(command, dict) else {}

    def read_profile(self) -> LaunchProfile:
        return load_profile(self.profile_path)

    world_path = property(lambda self: self.path / WORLD_FILE)

    def checkpoints(self) -> list[Path]:
        """checkpoint-N folders of this run, by step."""
        return checkpoint_folders(self.output_dir)

    def world_size(self) -> int | None:
        """The run's number of processes from its world record (None: no record, an older run)."""
        world = read_world(self.world_path)
        return world.world_size if world is not None else None

    def judge(self, folder: Path) -> CheckpointVerdict:
        """One checkpoint folder of this run judged with the run's world size: the verdict resume, the
        scoreboard, pins and merge share."""
        return judge_checkpoint(folder, self.world_size())

    def checkpoint_verdicts(self) -> list[CheckpointVerdict]:
        """Every checkpoint judged (backend.rundir.checkpoint_verdict), by step."""
        world_size = self.world_size()
        return [judge_checkpoint(c, world_size) for c in self.checkpoints()]

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoints that can be used (resume, merge, report): see checkpoints.judge_checkpoint."""
        return [v.path for v in self.checkpoint_verdicts() if v.complete]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def watch_dir(run_dir: Path) -> Path:
    """<run>/watch/: the watchdog's files and watch.log."""
    return Path(run_dir) / "watch"


def append_watch_log(run_dir: Path, text: str) -> None:
    """<run>/watch/watch.log: what went wrong in the supervisor's helper threads (never raises)."""
    try:
        folder = watch_dir(run_dir)
        folder.mkdir(exist_ok=True)  # not parents: a deleted run folder is not made again
        with open(folder / "watch.log", "a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
    except OSError:
        pass
