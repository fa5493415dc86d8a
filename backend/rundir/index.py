"""The user-level index of run folders, so runs are found again from any directory.

One JSON line per registered folder in `<data dir>/runs.jsonl`, appended with a single
write (safe for concurrent launchers). Folders under the workspace are found by a scan
too, so a lost index line never hides a run. A damaged line (not JSON, not UTF-8, no path)
is skipped and reported by `index_problems`, never fatal; the scans are bounded.

The index is read by one rule, `indexed_paths`, for the runs list and for `workbench status --line`
(backend.watch.inbox), which must stay light: this module imports the stdlib and backend.core only
at its top.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.fs import file_lock, write_bytes_atomic
from backend.core.paths import data_dir, workspace_dir

if TYPE_CHECKING:
    from backend.rundir.layout import RunFolder

LOCK_WAIT_S = 30.0  # forget rewrites the file: a stuck holder is a LockTimeout, never a hang


def index_path() -> Path:
    return data_dir() / "runs.jsonl"


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    """The index file, held against a concurrent `forget` (appends are single writes anyway)."""
    path = index_path()
    with file_lock(path.with_name(path.name + ".lock"), wait=LOCK_WAIT_S, make_parent=True):
        yield path


def register(folder: Path) -> None:
    line = json.dumps({"path": str(Path(folder).resolve())}) + "\n"
    with _locked() as path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def forget(folder: Path) -> None:
    """Take back `register` for a launch that failed: the lines naming `folder` go, all others stay
    byte for byte (damaged ones too)."""
    wanted = str(Path(folder).resolve())
    with _locked() as path:
        try:
            lines = path.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            return
        kept = [line for line in lines if _named(line) != wanted]
        if len(kept) != len(lines):
            write_bytes_atomic(path, b"".join(kept), mode=0o644)


def _named(line: bytes) -> str | None:
    try:
        recorded = json.loads(line)["path"]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    return recorded if isinstance(recorded, str) else None


MAX_INDEX_BYTES = 64 * 2**20  # about 300,000 runs; beyond that the rest is not read (and said so)
MAX_WORKSPACE_ENTRIES = 100_000
MAX_PATH_CHARS = 4096


def indexed_paths() -> tuple[list[str], list[str]]:
    """The folder paths the index names, as written, and one line per damaged index line."""
    path = index_path()
    problems: list[str] = []
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_INDEX_BYTES + 1)
    except FileNotFoundError:
        return [], []
    except OSError as err:
        return [], [f"{path}: cannot be read ({err.strerror or err})"]
    if len(data) > MAX_INDEX_BYTES:
        problems.append(f"{path}: only the first {MAX_INDEX_BYTES:,} bytes were read")
        data = data[:MAX_INDEX_BYTES]
    folders: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        why = None
        try:
            recorded = json.loads(raw.decode("utf-8"))["path"]
            if not isinstance(recorded, str) or not recorded or "\0" in recorded or len(recorded) > MAX_PATH_CHARS:
                why = "its path is not a folder path"
        except UnicodeDecodeError:
            why = "not UTF-8"
        except json.JSONDecodeError:
            why = "not JSON"
        except (KeyError, TypeError, IndexError):
            why = 'no "path" in it'
        if why:
            problems.append(f"damaged: {path} line {number}: {why}; skipped")
        else:
            folders.append(recorded)
    return folders, problems


def workspace_paths() -> list[str]:
    """The entries of the workspace folder (bounded), as paths; none when it cannot be listed."""
    found: list[str] = []
    try:
        with os.scandir(workspace_dir()) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_WORKSPACE_ENTRIES:
                    break
                found.append(entry.path)
    except OSError:
        pass
    return found


def index_problems() -> list[str]:
    """One line per damaged line of the index (shown by `runs`; the other runs are still listed)."""
    return indexed_paths()[1]


def known_folders() -> list[Path]:
    """Every run folder the user has: indexed ones and those in the workspace."""
    return [run.path for run in known_runs()]


def known_runs() -> list[RunFolder]:
    """`known_folders` as RunFolders, each path resolved once (the runs list asks every 2 s, and each
    resolve costs a system call per part of the path)."""
    seen: dict[Path, RunFolder] = {}
    for folder in [*indexed_paths()[0], *workspace_paths()]:
        _add_run(seen, Path(folder))
    return list(seen.values())


def _add_run(seen: dict[Path, RunFolder], folder: Path) -> None:
    from backend.rundir.layout import RunFolder  # pydantic: not on `status --line`'s path

    try:
        run = RunFolder(folder)
        if run.path not in seen and run.exists():
            seen[run.path] = run
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop
        pass
