"""Who owns an output_dir: a run writes its checkpoints only into an empty folder or its own.

swift rotates checkpoints (save_total_limit) by deleting the oldest `checkpoint-*` folders it
finds in output_dir, whoever wrote them; two runs in one folder also overwrite each other's
checkpoints. So at launch the run claims its output_dir with an owner file, created only if it
does not exist, and the folder must be empty or already this run's.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

OWNER_FILE = ".workbench-owner.json"
MAX_LISTED = 3


def owner_of(output_dir: Path) -> str | None:
    """The run folder that claimed `output_dir`, or None."""
    try:
        data = json.loads((Path(output_dir) / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run = data.get("run") if isinstance(data, dict) else None
    return run if isinstance(run, str) else None


def output_dir_problem(output_dir: Path, run_dir: Path | None = None) -> str | None:
    """Why `output_dir` cannot take this run's checkpoints, or None. `run_dir` None: a run not
    made yet (validation), which owns nothing."""
    output_dir = Path(output_dir)
    try:
        if not output_dir.exists():
            return None
        if not output_dir.is_dir():
            return f"output_dir {output_dir} is a file, not a folder."
        entries = sorted(p.name for p in output_dir.iterdir())
    except OSError as err:
        return f"output_dir {output_dir} cannot be read ({err.strerror or err})."
    owner = owner_of(output_dir)
    mine = run_dir is not None and owner == str(Path(run_dir).resolve())
    if mine:
        return None
    if owner is not None:
        return (f"output_dir {output_dir} holds the checkpoints of run {Path(owner).name} ({owner}); "
                "a second run there would rotate away or overwrite them.")
    others = [name for name in entries if name != OWNER_FILE]
    if others:
        shown = ", ".join(others[:MAX_LISTED]) + (f" and {len(others) - MAX_LISTED} more" if len(others) > MAX_LISTED
                                                   else "")
        return (f"output_dir {output_dir} is not empty ({shown}); swift's checkpoint rotation would delete "
                "checkpoint folders it finds there.")
    return None


def claim_output_dir(output_dir: Path, run_dir: Path) -> None:
    """Make `output_dir` and write its owner file; FileExistsError when another run claimed it first."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    owner = str(Path(run_dir).resolve())
    try:
        fd = os.open(output_dir / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if owner_of(output_dir) == owner:
            return
        raise FileExistsError(f"output_dir {output_dir} was just claimed by run {owner_of(output_dir)}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"run": owner, "run_id": Path(owner).name}, handle)


def release_output_dir(output_dir: Path, run_dir: Path) -> None:
    """Undo `claim_output_dir` for a launch that failed: the owner file goes if it names this run
    (a folder another run claimed is never touched); the folder stays, empty, so it is free again."""
    if owner_of(output_dir) != str(Path(run_dir).resolve()):
        return
    with contextlib.suppress(FileNotFoundError):
        (Path(output_dir) / OWNER_FILE).unlink()
