"""Queue tests: no keeper a test woke outlives it (`workbench queue` and other commands start one for a queue
with pending entries; in a test those entries may never end); a fake SLURM on PATH (`fake_slurm_path`)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.queue.keeper import keeper_pid
from tests.fakes import fake_commands
from tests.queue.slurm_fakes import FAKE_SBATCH, FAKE_SCANCEL, FAKE_SQUEUE


def _keeper_folders(under: Path) -> list[Path]:
    """Queue folders under `under` that a live keeper process names on its command line."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "backend.queue.keeper" in cmdline and cmdline[-1].startswith(str(under)):
            found.append(Path(cmdline[-1]))
    return found


@pytest.fixture(autouse=True)
def no_keeper_outlives_the_test(tmp_path: Path) -> Iterator[None]:
    yield
    for folder in _keeper_folders(tmp_path.resolve()):
        pid = keeper_pid(folder)  # proven the keeper of that folder (recorded pid, start time, marker)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def fake_slurm_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_runs: Path) -> Path:
    """A PATH whose sbatch, squeue and scancel are the fakes; their folder (calls.txt, squeue.txt)."""
    folder = fake_commands(tmp_path / "fakeslurm", {"sbatch": FAKE_SBATCH, "squeue": FAKE_SQUEUE,
                                                    "scancel": FAKE_SCANCEL}, "FAKE_SLURM_DIR", monkeypatch)
    monkeypatch.setattr("backend.queue.slurm._last_answer", None)  # no answer of another test's squeue
    return folder
