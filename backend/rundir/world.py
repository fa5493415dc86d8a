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


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content, or 'missing' / 'unreadable'."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    return digest.hexdigest()


def hashed_files(argv: list[str]) -> list[Path]:
    """The files a run's swift command reads whose content matters to a resume: the model's config.json
    and every local dataset file (`--dataset` / `--val_dataset` values; `path#N` takes N rows of it)."""
    files: list[Path] = []
    flag: str | None = None
    for word in argv:
        if word.startswith("--"):
            flag = word
            continue
        if flag == "--model":
            config = Path(word) / "config.json"
            if config.is_file():
                files.append(config)
        elif flag in ("--dataset", "--val_dataset"):
            path = Path(word.partition("#")[0])
            if path.is_file():
                files.append(path)
    return files


def world_of(nnodes: int, nproc_per_node: int, micro_batch: int, accumulation: int | None) -> World:
    return World(nnodes=nnodes, nproc_per_node=nproc_per_node, micro_batch=micro_batch,
                 gradient_accumulation_steps=accumulation)


def write_world(path: Path, world: World, argv: list[str], base_dir: Path | None) -> WorldRecord:
    record = WorldRecord(world=world, hashes={str(p.absolute()): file_sha256(p) for p in hashed_files(argv)},
                         base_dir=str(base_dir.absolute()) if base_dir is not None else None)
    write_text_atomic(path, record.model_dump_json(indent=2))
    return record


def read_world(path: Path) -> WorldRecord | None:
    """The record, or None when there is none or it cannot be read (an older run: nothing to compare)."""
    try:
        return WorldRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
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


def changed_files(record: WorldRecord) -> list[str]:
    """A warning for each file hashed at launch whose content differs now (or is gone)."""
    warnings = []
    for name, then in record.hashes.items():
        now = file_sha256(Path(name))
        if now == then:
            continue
        kind = "the model's config.json" if Path(name).name == "config.json" else "dataset file"
        if now == "missing":
            warnings.append(f"warning: {kind} {name} is gone since launch")
        else:
            warnings.append(f"warning: {kind} {name} changed since launch (sha256 {then[:12]} at launch, "
                            f"{now[:12]} now)")
    return warnings
