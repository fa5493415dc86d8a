"""The world a run was launched in, recorded for its resumes (#27).

`<run>/world.json`, written at launch: the shape of the training world (machines, processes per
machine, the micro batch and the gradient accumulation) and the content hashes (sha256) of the
model's config.json and of every local dataset file. A resume compares:

- a different world shape is refused with the exact difference, unless the user allows it
  (`workbench resume --allow-world-change`), which says what changes: the global batch, the steps
  per epoch, the order in which the data comes after the checkpoint;
- a changed (or vanished) config.json or dataset file is a warning naming the file: the run goes on
  with what is there now.

Stdlib + pydantic only (the layout imports this).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ValidationError

from backend.core.fs import write_text_atomic

WORLD_FILE = "world.json"
HASH_CHUNK = 1 << 20


class World(BaseModel):
    """The shape of a run's training world."""

    nnodes: int = 1
    nproc_per_node: int = 1
    micro_batch: int = 1  # per_device_train_batch_size
    gradient_accumulation_steps: int | None = None  # None: swift's default (the same at launch and resume)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def global_batch(self) -> int | None:
        if self.gradient_accumulation_steps is None:
            return None
        return self.world_size * self.micro_batch * self.gradient_accumulation_steps

    def batch_words(self) -> str:
        accumulation = self.gradient_accumulation_steps
        total = f" = {self.global_batch}" if self.global_batch is not None else ""
        return (f"{self.nnodes} machine(s) x {self.nproc_per_node} process(es) x micro batch {self.micro_batch} x "
                f"accumulation {accumulation if accumulation is not None else 'swift default'}{total}")


class WorldRecord(BaseModel):
    """world.json: the world at launch, the hashes of the files the run reads, and the profile's folder
    (relative paths in the profile are resolved from it when a resume rebuilds the launch)."""

    world: World
    hashes: dict[str, str] = {}  # absolute path -> sha256 (hex); "missing" when it was not there
    base_dir: str | None = None

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def base_path(self) -> Path | None:
        """The profile's folder at launch, which its relative paths are read against."""
        return Path(self.base_dir) if self.base_dir else None


MAX_HASHED_BYTES = 64 * 2**30  # a dataset file larger than this is not hashed (reading it would take minutes)


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file's content, or 'missing' / 'unreadable' / 'not a regular file' /
    'too large'. Opened without blocking and checked before it is read: a FIFO or a device (/dev/zero) is
    never read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as handle:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return "not a regular file"
            if info.st_size > MAX_HASHED_BYTES:
                return "too large"
            digest = hashlib.sha256()
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
        except OSError:
            return "unreadable"
    return digest.hexdigest()


def hashed_files(argv: list[str], existing: bool = True) -> list[Path]:
    """The files a run's swift command reads whose content matters to a resume: the model's config.json
    and every local dataset file (`--dataset` / `--val_dataset` values; `path#N` takes N rows of it).
    `existing`: only those that are regular files now (at launch); False: every path named (at resume, where
    a file gone since launch is said)."""
    files: list[Path] = []
    flag: str | None = None
    for word in argv:
        if word.startswith("--"):
            flag = word
            continue
        if flag == "--model":
            files.append(Path(word) / "config.json")
        elif flag in ("--dataset", "--val_dataset"):
            files.append(Path(word.partition("#")[0]))
    return [path for path in files if path.is_file()] if existing else files


def world_of(nnodes: int, nproc_per_node: int, micro_batch: int, accumulation: int | None) -> World:
    return World(nnodes=nnodes, nproc_per_node=nproc_per_node, micro_batch=micro_batch,
                 gradient_accumulation_steps=accumulation)


def write_world(path: Path, world: World, argv: list[str], base_dir: Path | None) -> WorldRecord:
    record = WorldRecord(world=world, hashes={str(p.absolute()): file_sha256(p) for p in hashed_files(argv)},
                         base_dir=str(base_dir.absolute()) if base_dir is not None else None)
    write_text_atomic(path, record.model_dump_json(indent=2))
    return record


class WorldUnreadable(ValueError):
    """world.json is there but is not a world record (damaged or edited by hand): the message says why."""


MAX_WORLD_BYTES = 4 * 2**20


def load_world(path: Path) -> WorldRecord | None:
    """The record; None only when there is none (an older run: nothing to compare). WorldUnreadable when the
    file is there but cannot be read as one."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_WORLD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise WorldUnreadable(f"{path.name} cannot be read ({err.strerror or err})") from None
    if len(raw) > MAX_WORLD_BYTES:
        raise WorldUnreadable(f"{path.name} is over {MAX_WORLD_BYTES // 2**20} MiB: not a world record")
    try:
        return WorldRecord.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise WorldUnreadable(f"{path.name} is damaged: {where}: {first['msg']}") from None
    except ValueError as err:
        raise WorldUnreadable(f"{path.name} is damaged ({err})") from None


def read_world(path: Path) -> WorldRecord | None:
    """The record, or None when there is none or it cannot be read (the world size is then unknown; resume
    uses load_world, which says why)."""
    try:
        return load_world(path)
    except WorldUnreadable:
        return None


def launch_base_dir(path: Path) -> Path | None:
    """The profile's folder at launch, from the run's world record; None for a run without one."""
    record = read_world(path)
    return record.base_path if record is not None else None


FIELDS = (("nnodes", "machines (nnodes)"), ("nproc_per_node", "processes per machine (nproc_per_node)"),
          ("micro_batch", "micro batch (per_device_train_batch_size)"),
          ("gradient_accumulation_steps", "gradient_accumulation_steps"))


def world_differences(then: World, now: World) -> list[str]:
    """Each field of the world shape that differs: '<field>: <at launch> at launch, <now> now'."""
    return [f"{words}: {getattr(then, name)} at launch, {getattr(now, name)} now"
            for name, words in FIELDS if getattr(then, name) != getattr(now, name)]


def what_changes(then: World, now: World) -> list[str]:
    """What a resume in another world changes, said before it goes."""
    lines = [f"global batch: {then.batch_words()} -> {now.batch_words()}"]
    if then.global_batch and now.global_batch and then.global_batch != now.global_batch:
        lines.append(f"steps per epoch: times {then.global_batch}/{now.global_batch} (each optimizer step takes "
                     f"{now.global_batch} sequences instead of {then.global_batch}); the step count carries on from "
                     "the checkpoint, so the schedule's remaining steps cover a different share of the data")
    else:
        lines.append("steps per epoch: unchanged only if the global batch is (it is unknown or equal here)")
    if then.world_size != now.world_size:
        lines.append(f"data order: the sampler splits the data over {now.world_size} process(es) instead of "
                     f"{then.world_size}; after the checkpoint the rows come in another order than an "
                     "uninterrupted run would have seen, and the RNG states of the ranks are not all restored")
    else:
        lines.append("data order: the same sampler split; the batches are cut differently")
    return lines


def changed_files(record: WorldRecord, argv: list[str]) -> list[str]:
    """A warning for each file hashed at launch whose content differs now (or is gone). Only the files the
    run's command `argv` names are looked at: any other entry of world.json (edited by hand) is not read."""
    named = {str(path.absolute()) for path in hashed_files(argv, existing=False)}
    warnings = [f"warning: {WORLD_FILE} names {name}, which the run's command does not read: not checked"
                for name in record.hashes if name not in named]
    for name, then in record.hashes.items():
        if name not in named:
            continue
        now = file_sha256(Path(name))
        if now == then:
            continue
        kind = "the model's config.json" if Path(name).name == "config.json" else "dataset file"
        if now == "missing":
            warnings.append(f"warning: {kind} {name} is gone since launch")
        elif now in ("unreadable", "not a regular file", "too large"):
            warnings.append(f"warning: {kind} {name} is {now} now: not compared with the launch's")
        else:
            warnings.append(f"warning: {kind} {name} changed since launch (sha256 {then[:12]} at launch, "
                            f"{now[:12]} now)")
    return warnings
