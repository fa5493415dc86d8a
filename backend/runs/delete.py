"""Delete a run: only a proven run folder, not running, with no live process left."""

from __future__ import annotations

import shutil

from backend.core.process_identity import run_marker
from backend.rundir.layout import FolderBusy, FolderNotWritable, RunFolder
from backend.runs.errors import RunRefused
from backend.runs.status import refresh


def delete_run(run: RunFolder, damaged_ok: bool = True) -> None:
    """Remove a proven run folder that is not running (the CLI and the TUI ask first). A damaged run
    (state.json unreadable) only with `damaged_ok`. RunRefused with the reason otherwise."""
    problem = run.identity_problem()
    if problem:
        raise RunRefused(f"not deleted: {problem}")
    try:
        with run.control("delete"):
            state = refresh(run)
            if state.is_active:
                where = f" on host {state.host}" if state.on_other_host() else ""
                raise RunRefused(f"run {run.run_id} is {state.status}{where}; stop it before deleting")
            if state.status == "damaged" and not damaged_ok:
                raise RunRefused(f"run {run.run_id} is {state.failure_reason}; confirm to delete it anyway")
            if run_marker(run.path).processes():
                raise RunRefused(f"run {run.run_id} still has live processes; stop it before deleting")
            shutil.rmtree(run.path)
    except (FolderBusy, FolderNotWritable) as err:
        raise RunRefused(f"not deleted: {err}") from None
    except OSError as err:
        raise RunRefused(f"could not delete all of {run.path}: {err.strerror or err}") from None
