"""The checkpoint verdict: is a `checkpoint-N` folder complete enough to resume from, and if not, what
does it lack (#27).

A checkpoint is complete when the trainer wrote all of what `--resume_from_checkpoint` reads back:

    weights      adapter_model.safetensors / .bin (LoRA), model*.safetensors / pytorch_model*.bin or
                 their index (full), a DeepSpeed global_step* folder, or FSDP's pytorch_model_fsdp*
    optimizer    optimizer.pt / optimizer.bin / optimizer_* (FSDP), or inside DeepSpeed's global_step*
    scheduler    scheduler.pt (DeepSpeed with its own scheduler keeps it inside global_step*)
    RNG state    rng_state.pth for one process; rng_state_<rank>.pth for every rank of a bigger world
    trainer_state.json, written last

What ms-swift 4.6 really wrote for a CPU LoRA checkpoint of the tiny model (checked on a real run):
adapter_model.safetensors, adapter_config.json, additional_config.json, args.json, optimizer.pt,
scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin, README.md.

An empty file counts as missing (a full disk leaves them so). Only this host's view of the folder is
judged: a multi-node run whose ranks write to disks of their own is judged on each node.

Stdlib only: the supervisor and the layout import this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "pytorch_model.bin",
                "model.safetensors.index.json", "pytorch_model.bin.index.json")
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
SCHEDULER_FILE = "scheduler.pt"
TRAINER_STATE = "trainer_state.json"
RNG_SINGLE = "rng_state.pth"
RNG_RANK = re.compile(r"rng_state_(\d+)\.pth")
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")


@dataclass(frozen=True)
class CheckpointVerdict:
    """One checkpoint folder judged: complete, or what it lacks (each a short phrase)."""

    path: Path
    step: int | None
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def problem(self) -> str | None:
        """'checkpoint-8 lacks optimizer.pt (optimizer state)', or None when complete."""
        if not self.missing:
            return None
        return f"{self.path.name} lacks {', '.join(self.missing)}"


def _non_empty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def judge_checkpoint(folder: Path, world_size: int | None = None) -> CheckpointVerdict:
    """The verdict on one checkpoint folder. `world_size`: the run's number of processes when known
    (its world record); unknown, the rng_state_<rank>.pth files found must run from rank 0 unbroken."""
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    step = int(match.group(1)) if match else None
    if not folder.is_dir():
        return CheckpointVerdict(folder, step, ("the folder itself (it is not a folder)",))
    entries = _entries(folder)
    names = {p.name for p in entries}
    deepspeed = any(p.is_dir() and p.name.startswith("global_step") for p in entries)
    fsdp_weights = any(p.name.startswith("pytorch_model_fsdp") for p in entries)
    missing: list[str] = []
    has_weights = deepspeed or fsdp_weights or any(_non_empty(folder / name) for name in WEIGHT_FILES) or any(
        _non_empty(p) for p in entries if re.fullmatch(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)", p.name))
    if not has_weights:
        missing.append("weights (no adapter_model.safetensors or model file)")
    has_optimizer = deepspeed or any(_non_empty(folder / name) for name in OPTIMIZER_FILES) or any(
        p.name.startswith("optimizer_") for p in entries)
    if not has_optimizer:
        missing.append("optimizer.pt (optimizer state)")
    if not deepspeed and not _non_empty(folder / SCHEDULER_FILE):
        missing.append("scheduler.pt (learning-rate schedule)")
    missing.extend(_rng_missing(folder, names, world_size))
    if not _non_empty(folder / TRAINER_STATE):
        missing.append("trainer_state.json (written last: cut off while being saved)")
    return CheckpointVerdict(folder, step, tuple(missing))


def _rng_missing(folder: Path, names: set[str], world_size: int | None) -> list[str]:
    ranks = {int(m.group(1)) for name in names if (m := RNG_RANK.fullmatch(name)) and _non_empty(folder / name)}
    single = _non_empty(folder / RNG_SINGLE)
    if world_size is not None and world_size > 1:
        lacking = [r for r in range(world_size) if r not in ranks]
        if lacking:
            shown = ", ".join(f"rng_state_{r}.pth" for r in lacking[:4]) + (" ..." if len(lacking) > 4 else "")
            return [f"{shown} (RNG state of rank{'s' if len(lacking) > 1 else ''} "
                    f"{', '.join(map(str, lacking[:4]))} of {world_size})"]
        return []
    if world_size == 1:
        return [] if single or ranks == {0} else [f"{RNG_SINGLE} (RNG state)"]
    if single:
        return []
    if not ranks:
        return ["rng_state.pth or rng_state_<rank>.pth (RNG state)"]
    lacking = [r for r in range(max(ranks) + 1) if r not in ranks]
    if lacking:
        return [f"{', '.join(f'rng_state_{r}.pth' for r in lacking[:4])} (RNG state of a rank between 0 and "
                f"{max(ranks)})"]
    return []


def checkpoint_problem(folder: Path, world_size: int | None = None) -> str | None:
    """Why a checkpoint folder is incomplete (cut off by a stop or a full disk), or None."""
    return judge_checkpoint(folder, world_size).problem


def checkpoint_folders(output_dir: Path) -> list[Path]:
    """checkpoint-N folders in swift's output folder, by step."""
    if not output_dir.is_dir():
        return []
    found = [p for p in _entries(output_dir) if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


@dataclass(frozen=True)
class ResumeChoice:
    """The newest complete checkpoint (None: there is none) and the newer ones skipped, each with why."""

    checkpoint: Path | None
    skipped: tuple[CheckpointVerdict, ...]

    def lines(self) -> list[str]:
        """What a resume says: each skipped checkpoint and why."""
        return [f"skipped {v.problem}" for v in self.skipped]


def choose_resume_checkpoint(checkpoints: list[Path], world_size: int | None = None) -> ResumeChoice:
    """The newest complete checkpoint of `checkpoints` (by step), saying which newer ones were skipped."""
    skipped: list[CheckpointVerdict] = []
    for folder in reversed(checkpoints):
        verdict = judge_checkpoint(folder, world_size)
        if verdict.complete:
            return ResumeChoice(folder, tuple(skipped))
        skipped.append(verdict)
    return ResumeChoice(None, tuple(skipped))
