"""The session's real trainings, trained once for the whole pytest session, not once per xdist worker.

They live beside the model cache, in the folder every worker of the session shares (tests/conftest.py
`workbench_home`), the way the tiny model is built once (backend/models/demo/build.py): the first worker
to ask takes a file lock and trains; the others wait on the lock and find the published run. A run is
published by writing its record atomically once it has finished (the run folder itself is never renamed:
swift's files inside it name their own paths), so a reader sees a finished run or none.

A test that only reads a shared run uses it as it is; a test that writes into it (a merge, a pin, a job,
a delete) works on `private_copy`, or the sharing would make the tests depend on each other's order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.core.fs import file_lock, write_text_atomic
from backend.rundir import index
from backend.rundir.layout import RunFolder


@dataclass(frozen=True)
class SharedRun:
    """A published run: its folder and what the command that trained it printed."""

    run: RunFolder
    output: str


Trainer = Callable[[Path], tuple[RunFolder, str]]  # a fresh workspace -> the finished run, the CLI's output


def shared_dir() -> Path:
    """The session's shared folder (the one holding the model cache of WORKBENCH_CACHE_DIR)."""
    return Path(os.environ["WORKBENCH_CACHE_DIR"]).parent / "shared-runs"


def shared_run(name: str, train: Trainer) -> SharedRun:
    """The run `name` of this session, trained by `train` if no worker has yet. A training that failed is
    not tried again by the next worker: it fails with the first one's reason."""
    folder = shared_dir()
    record = folder / f"{name}.json"
    with file_lock(folder / f".{name}.lock", make_parent=True):
        if not record.is_file():
            _train(folder, record, name, train)
    data = json.loads(record.read_text(encoding="utf-8"))
    if "error" in data:
        raise AssertionError(f"the shared run {name!r} failed to train (in another worker):\n{data['error']}")
    run = RunFolder(Path(data["path"]))
    index.register(run.path)  # this worker's run index: `workbench ... RUN_ID` finds it
    return SharedRun(run, data["output"])


def _train(folder: Path, record: Path, name: str, train: Trainer) -> None:
    workspace = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=folder))
    try:
        run, output = train(workspace)
    except Exception:  # the trainer's AssertionError included: recorded for the other workers, raised here
        write_text_atomic(record, json.dumps({"error": traceback.format_exc()[-6000:]}))
        raise
    write_text_atomic(record, json.dumps({"path": str(run.path), "output": output}))


@contextmanager
def private_copy(run: RunFolder, home: Path) -> Iterator[RunFolder]:
    """A copy of a shared run for tests that write into it, under `home`, with a run index and workspace of
    its own while the context lasts (the copy has the shared run's id: one index cannot hold both).
    The shared run's jobs (other tests' inferences), merged models and files being written are left behind."""
    target = home / "runs" / run.path.name
    # a reader elsewhere may be writing the run's events summary now (the first open of an ended run makes
    # one): its temporary file (backend.core.fs, `.NAME.*.tmp`) is no part of the run and may vanish mid-copy
    shutil.copytree(run.path, target, symlinks=True, ignore=shutil.ignore_patterns("jobs", "merged", ".*.tmp"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBENCH_DATA_DIR", str(home / "data"))
        patch.setenv("WORKBENCH_WORKSPACE", str(home / "runs"))
        index.register(target)
        yield RunFolder(target)
