"""A finished run trained further as a new run (#14): `workbench resume RUN --as-new-run`.

The finished quickstart run (318 LoRA steps, tests/jobs/conftest.py) is refused a plain resume;
with --as-new-run a new run starts from its last checkpoint's adapter. Evidence that the weights
carried over: the new run's first logged loss is near where the finished run ended, far below
where a fresh adapter starts. The finished run's folder is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from tests.runs.helpers import wait_for
from tests.timing import scaled

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _losses(run: RunFolder) -> list[float]:
    return [e["loss"] for e in read_all(run.events_path) if e["type"] == "log" and "loss" in e]


def _files(run: RunFolder) -> dict[str, int]:
    """The run's checkpoints and records (the watchdog's status file is left out: it is the
    watchdog's to rewrite)."""
    kept = [*run.output_dir.rglob("*"), run.profile_path, run.command_path, run.events_path]
    return {str(p.relative_to(run.path)): p.stat().st_mtime_ns for p in kept if p.is_file()}


def _workbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], capture_output=True, text=True,
                          timeout=scaled(120), cwd=REPO)


def test_a_finished_run_goes_on_as_a_new_run_from_its_adapter(quill_run: RunFolder) -> None:
    before = _files(quill_run)
    finished_losses = _losses(quill_run)

    plain = _workbench("resume", quill_run.run_id)
    assert plain.returncode == 2
    assert f"workbench resume {quill_run.run_id} --as-new-run" in plain.stderr

    started = _workbench("resume", quill_run.run_id, "--as-new-run", "--max-steps", "5", "--detach")
    assert started.returncode == 0, started.stderr
    new = find_run(started.stdout.strip().splitlines()[-1])
    assert new.path != quill_run.path
    wait_for(lambda: not refresh(new).is_active, timeout=600, what="the continued run's end")
    assert refresh(new).status == "finished", new.log_tail()[-2000:]

    new_losses = _losses(new)
    # the finished run: from about 7.4 down to about 0.2 (seen here: 7.43 -> 0.20); a fresh adapter starts at 7.4
    assert finished_losses[0] > 2.0 and finished_losses[-1] < 0.6
    assert new_losses and new_losses[0] < 0.6, (new_losses, finished_losses[:3], finished_losses[-3:])
    argv = json.loads(new.command_path.read_text())["argv"]
    assert argv[argv.index("--adapters") + 1] == str(quill_run.output_dir / "checkpoint-318")
    assert len(before) > 10 and _files(quill_run) == before  # its checkpoints and records untouched
