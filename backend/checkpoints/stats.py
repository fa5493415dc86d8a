"""A checkpoint folder's verdict (backend.rundir.checkpoint_verdict) and its size on disk, remembered for a complete
checkpoint so a redraw of the scoreboard does not walk it again."""

from __future__ import annotations

from pathlib import Path

from backend.core.fs import tree_size
from backend.core.tail import FileMark, mark
from backend.rundir.checkpoint_verdict import CHECKPOINT_NAME, FolderListing, judge_checkpoint, list_folder

_COMPLETE_CACHE: dict[tuple[str, int | None], tuple[tuple[FileMark, FileMark], int]] = {}
_MAX_CACHED = 4096


def _listed(folder: Path) -> FolderListing:
    """The folder listed once; FileNotFoundError when it vanished (rotated away) before it was read."""
    try:
        return list_folder(folder)
    except NotADirectoryError as err:
        raise FileNotFoundError(folder) from err


def judged(folder: Path, world_size: int | None) -> tuple[str | None, int]:
    """(checkpoint_problem, size on disk) of a checkpoint folder, judged with the run's world size (the verdict
    resume gives, RunFolder.judge). A complete one is remembered by its
    folder's and its trainer_state.json's stat (the trainer writes that file last and never touches a
    saved checkpoint again), so a redraw does not judge it again."""
    folder_mark, state_mark = mark(folder), mark(folder / "trainer_state.json")
    if folder_mark is None:
        folder.stat()  # raise what the stat met: FileNotFoundError for a folder rotated away meanwhile
        raise FileNotFoundError(folder)  # it came back between the two looks: read it at the next redraw
    stamp = (folder_mark, state_mark) if state_mark is not None else None
    key = (str(folder), world_size)
    cached = _COMPLETE_CACHE.get(key)
    if stamp and cached is not None and cached[0] == stamp:
        return None, cached[1]
    try:
        listing = _listed(folder)
    except FileNotFoundError:
        raise
    except OSError as err:
        return f"{folder.name} cannot be read ({err.strerror or err})", 0
    problem = judge_checkpoint(folder, world_size, listing=listing).problem
    used = sum(listing.files.values()) + sum(_subfolder_size(folder / name) for name in listing.folders)
    if problem is None and stamp:
        if len(_COMPLETE_CACHE) >= _MAX_CACHED:
            _COMPLETE_CACHE.clear()
        _COMPLETE_CACHE[key] = (stamp, used)
    return problem, used


def _subfolder_size(folder: Path) -> int:
    try:
        return tree_size(folder)
    except FileNotFoundError:  # deleted meanwhile: not counted, as a file deleted during the walk
        return 0


def step_of(folder: Path) -> int | None:
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def clear_cache() -> None:
    """Forget the remembered verdicts (a benchmark's cold read)."""
    _COMPLETE_CACHE.clear()
