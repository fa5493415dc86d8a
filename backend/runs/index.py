"""The user-level index of run folders, so runs are found again from any directory.

One JSON line per registered folder in `<data dir>/runs.jsonl`, appended with a single
write (safe for concurrent launchers). Folders under the workspace are found by a scan
too, so a lost index line never hides a run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from backend.paths import data_dir
from backend.runs.layout import RunFolder, workspace_dir


def index_path() -> Path:
    return data_dir() / "runs.jsonl"


def register(folder: Path) -> None:
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"path": str(Path(folder).resolve())}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def known_folders() -> list[Path]:
    """Every run folder the user has: indexed ones and those in the workspace."""
    seen: dict[str, Path] = {}
    try:
        for line in index_path().read_text(encoding="utf-8").splitlines():
            try:
                recorded = json.loads(line)["path"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
            seen.setdefault(recorded, Path(recorded))
    except FileNotFoundError:
        pass
    workspace = workspace_dir()
    if workspace.is_dir():
        for child in workspace.iterdir():
            if (child / "state.json").is_file():
                seen.setdefault(str(child.resolve()), child.resolve())
    return [path for path in seen.values() if RunFolder(path).exists()]
