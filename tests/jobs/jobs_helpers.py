"""Helpers for the merge / chat / inference tests: real trainings of the quickstart profile."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from backend.chat.client import WORKER_MARKER_ENV
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.jobs.job import JobFolder, JobState, wait_job
from backend.profile import LaunchProfile, load_profile
from backend.rundir.layout import RunFolder
from backend.runs.start import start_run
from backend.runs.status import refresh
from tests.timing import scaled, wait_until


def train_quickstart(workspace: Path, timeout: float = 900, **changes: dict[str, Any]) -> RunFolder:
    """Train the shipped quickstart profile (sections updated with `changes`) to its end."""
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    for section, values in changes.items():
        data[section].update(values)
    run = start_run(LaunchProfile.model_validate(data), base_dir=SHIPPED_PROFILES_DIR, workspace=workspace)
    wait_until(lambda: not refresh(run).is_active, timeout, "the training's end", interval=0.5,
               detail=lambda: run.log_tail(3000))
    state = run.read_state()
    assert state.status == "finished", f"{state.status}: {state.failure_reason}\n{run.log_tail(3000)}"
    return run


def finish(job: JobFolder, timeout: float = 300) -> JobState:
    """Wait for a job and insist that it finished (the log tail explains a failure)."""
    state = wait_job(job, timeout=scaled(timeout))
    assert state.status == "finished", f"{state.status}: {state.failure_reason}\n{job.log_tail(3000)}"
    return state


def results(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def chat_workers() -> list[psutil.Process]:
    """Live chat worker processes started by this test process (marked with its pid)."""
    mine = str(os.getpid())
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(WORKER_MARKER_ENV) == mine and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """The pids still alive (not zombies) after up to `timeout` seconds."""
    limit, start = scaled(timeout), time.monotonic()
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() - start > limit:
            return alive
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
