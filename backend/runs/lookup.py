"""Find a run by a reference (a folder path, a full id, a unique prefix or part of an id), and list
every run, active ones first."""

from __future__ import annotations

from pathlib import Path

from backend.rundir import index
from backend.rundir.layout import RunFolder
from backend.runs.errors import RunNotFound
from backend.runs.status import refresh

MIN_REF_CHARS = 4  # a shorter part of an id matches too much to act on
MAX_REF_CHARS = 1024


def _check_ref(ref: str) -> str:
    if not ref or not ref.strip():
        raise RunNotFound("an empty run reference matches no run; give a run id from `workbench runs`")
    if len(ref) > MAX_REF_CHARS:
        raise RunNotFound(f"a run reference of {len(ref):,} characters matches no run (ids are short); "
                          "`workbench runs` lists them")
    if "\0" in ref:
        raise RunNotFound("a run reference cannot contain a NUL character")
    return ref


def find_run(ref: str, strict: bool = False) -> RunFolder:
    """A run by folder path, full id, or unique id prefix (or, unless `strict`, unique part of an id)
    of at least MIN_REF_CHARS characters. `strict` (delete): the folder must be a proven run folder."""
    ref = _check_ref(ref)
    path = Path(ref).expanduser()
    if "/" in ref or ref in (".", "..") or _is_dir(path) and RunFolder(path).exists():
        if not _is_dir(path):
            raise RunNotFound(f"{ref!r} is not a run folder" + (" (it is a file)" if _is_file(path) else ""))
        folder = RunFolder(path)
        problem = folder.identity_problem()
        if problem and (strict or not folder.exists()):
            raise RunNotFound(problem)
        return folder
    folders = index.known_folders()
    exact = [f for f in folders if f.name == ref]
    if not exact and len(ref) < MIN_REF_CHARS:
        raise RunNotFound(f"{ref!r} is too short to pick a run: give the full id or at least {MIN_REF_CHARS} "
                          "characters of its start (`workbench runs` lists them)")
    matches = exact or [f for f in folders if f.name.startswith(ref)]
    if not matches and not strict:
        matches = [f for f in folders if ref in f.name]
    if len(matches) == 1:
        folder = RunFolder(matches[0])
        problem = folder.identity_problem() if strict else None
        if problem:
            raise RunNotFound(problem)
        return folder
    if not matches:
        how = "no run id is or starts with" if strict else "no run matches"
        raise RunNotFound(f"{how} {ref!r}; `workbench runs` lists them")
    names = ", ".join(sorted(m.name for m in matches)[:5])
    raise RunNotFound(f"{ref!r} matches several runs ({names}); give more of the id")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def list_runs() -> list[RunFolder]:
    """Every run, active ones first, then newest first. A damaged one is listed, never fatal."""
    runs = index.known_runs()
    states = {run.path: refresh(run) for run in runs}
    return sorted(runs, key=lambda r: (not states[r.path].is_active, -states[r.path].created_at))
