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

An empty file counts as missing (a full disk leaves them so). trainer_state.json must parse and its
`global_step` be the folder's own step (a truncated one, or a folder of another run planted or copied here,
is not this run's checkpoint-N), and no entry may be a symlink leading out of the folder (resume would read
whatever it points at). Only this host's view of the folder is judged: a multi-node run whose ranks write
to disks of their own is judged on each node.

The one verdict: resume, the scoreboard, pins and merge all judge with the run's world size
(RunFolder.judge).

Stdlib only: the supervisor and the layout import this.
"""

from __future__ import annotations

import json
import os
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
    """One checkpoint folder judged: complete, or what it lacks and what is wrong in it (each a short phrase)."""

    path: Path
    step: int | None
    missing: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing and not self.wrong

    @property
    def problem(self) -> str | None:
        """'checkpoint-8 lacks optimizer.pt (optimizer state)', or None when complete."""
        said = ([f"lacks {', '.join(self.missing)}"] if self.missing else []) + list(self.wrong)
        return f"{self.path.name} {'; '.join(said)}" if said else None


@dataclass(frozen=True)
class FolderListing:
    """One look at a checkpoint folder: its files with their sizes (links inside it followed), its subfolders,
    and its entries that are symlinks leading out of it (neither counted as files nor as folders)."""

    files: dict[str, int]
    folders: tuple[str, ...]
    outside: tuple[str, ...] = ()

    def non_empty(self, name: str) -> bool:
        return self.files.get(name, 0) > 0


def list_folder(folder: Path) -> FolderListing:
    """The folder's entries, one stat each; FileNotFoundError or NotADirectoryError when it is not a folder
    (an entry deleted meanwhile is left out)."""
    files: dict[str, int] = {}
    folders: list[str] = []
    outside: list[str] = []
    real: str | None = None
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                if entry.is_symlink():
                    real = real or os.path.realpath(folder)
                    if os.path.commonpath([real, os.path.realpath(entry.path)]) != real:
                        outside.append(entry.name)
                        continue
                if entry.is_dir():
                    folders.append(entry.name)
                elif entry.is_file():
                    files[entry.name] = entry.stat().st_size
            except (OSError, ValueError):
                continue
    return FolderListing(files, tuple(folders), tuple(sorted(outside)))


def judge_checkpoint(folder: Path, world_size: int | None = None,
                     listing: FolderListing | None = None) -> CheckpointVerdict:
    """The verdict on one checkpoint folder. `world_size`: the run's number of processes when known
    (its world record); unknown, the rng_state_<rank>.pth files found must run from rank 0 unbroken.
    `listing`: the folder as already listed (the scoreboard lists it once for the verdict and the size)."""
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    step = int(match.group(1)) if match else None
    if listing is None:
        try:
            listing = list_folder(folder)
        except OSError:
            return CheckpointVerdict(folder, step, ("the folder itself (it is not a folder)",))
    deepspeed = any(name.startswith("global_step") for name in listing.folders)
    fsdp_weights = any(name.startswith("pytorch_model_fsdp") for name in (*listing.files, *listing.folders))
    missing: list[str] = []
    has_weights = deepspeed or fsdp_weights or any(listing.non_empty(name) for name in WEIGHT_FILES) or any(
        listing.non_empty(name) for name in listing.files
        if re.fullmatch(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)", name))
    if not has_weights:
        missing.append("weights (no adapter_model.safetensors or model file)")
    has_optimizer = deepspeed or any(listing.non_empty(name) for name in OPTIMIZER_FILES) or any(
        name.startswith("optimizer_") for name in (*listing.files, *listing.folders))
    if not has_optimizer:
        missing.append("optimizer.pt (optimizer state)")
    if not deepspeed and not listing.non_empty(SCHEDULER_FILE):
        missing.append("scheduler.pt (learning-rate schedule)")
    missing.extend(_rng_missing(listing, world_size))
    wrong = [f"{name} is a symlink leading out of the folder" for name in listing.outside]
    if not listing.non_empty(TRAINER_STATE):
        missing.append("trainer_state.json (written last: cut off while being saved)")
    else:
        wrong.extend(_trainer_state_wrong(folder / TRAINER_STATE, step))
    return CheckpointVerdict(folder, step, tuple(missing), tuple(wrong))


MAX_TRAINER_STATE_BYTES = 256 * 2**20  # its log_history grows with the run; far above any real one


def _trainer_state_wrong(path: Path, step: int | None) -> list[str]:
    """What is wrong with trainer_state.json: it does not parse (cut off), or its global_step is not the folder's."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TRAINER_STATE_BYTES + 1)
    except OSError as err:
        return [f"its trainer_state.json cannot be read ({err.strerror or err})"]
    if len(raw) > MAX_TRAINER_STATE_BYTES:
        return [f"its trainer_state.json is over {MAX_TRAINER_STATE_BYTES // 2**20} MiB (not the trainer's)"]
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return ["its trainer_state.json does not parse (cut off while being saved)"]
    global_step = data.get("global_step") if isinstance(data, dict) else None
    if not isinstance(global_step, int) or isinstance(global_step, bool):
        return ["its trainer_state.json has no global_step"]
    if step is not None and global_step != step:
        return [f"its trainer_state.json says step {global_step}, not {step} (a checkpoint of another run, or "
                "moved here)"]
    return []


def _rng_missing(listing: FolderListing, world_size: int | None) -> list[str]:
    ranks = {int(m.group(1)) for name in listing.files if (m := RNG_RANK.fullmatch(name)) and listing.non_empty(name)}
    single = listing.non_empty(RNG_SINGLE)
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
    try:
        found = [p for p in output_dir.iterdir() if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name)]
    except OSError:
        return []
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
