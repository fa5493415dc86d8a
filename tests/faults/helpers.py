"""Fake run folders and plain processes for the fault tests: no swift, no model, milliseconds each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from typer.testing import CliRunner, Result

from backend.cli import full_app
from backend.core.process_identity import RUN_MARKER_ENV
from backend.rundir.layout import RunFolder
from tests import timing
from tests.terminal_signals import default_terminal_signals

runner = CliRunner()


def cli(*args: str, input: str | None = None) -> Result:
    """`workbench ARGS` in this process (exceptions are kept on the result, not raised)."""
    return runner.invoke(full_app(), list(args), input=input)


def assert_clean_exit(result: Result, codes: tuple[int, ...] = (0, 1, 2)) -> None:
    """The user's promise: an exit code that means something, and never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {type(result.exception).__name__}: {result.exception}\n{result.output}")
    assert result.exit_code in codes, result.output
    assert "Traceback" not in result.output, result.output


def fake_run(workspace: Path, run_id: str = "20260101-120000-fake-0001", *, status: str = "finished",
             profile_name: str = "fake", state: dict[str, Any] | None = None,
             argv: list[str] | None = None, checkpoints: tuple[int, ...] = ()) -> RunFolder:
    """A proven run folder (identity file, command, profile, state) with complete fake checkpoints."""
    run = RunFolder.create(workspace, run_id)
    command = {"argv": argv or [sys.executable, "-c", "import time; time.sleep(60)"], "env": {},
               "cwd": str(run.path), "output_dir": str(run.path / "output"), "shell": "fake"}
    run.command_path.write_text(json.dumps(command))
    run.profile_path.write_text(f'name = "{profile_name}"\n')
    base = run.new_state(profile_name).model_copy(update={"status": status, "started_at": time.time() - 60})
    run.write_state(base.model_copy(update=state or {}))
    for step in checkpoints:
        complete_checkpoint(run.path / "output" / f"checkpoint-{step}", step)
    return run


def complete_checkpoint(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    # what a real single-process LoRA checkpoint holds to be resumable (backend/rundir/checkpoint_verdict.py)
    for name in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (folder / name).write_bytes(b"\0" * 64)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def write_events(run: RunFolder, *events: dict[str, Any]) -> None:
    with open(run.events_path, "a", encoding="utf-8") as handle:
        for event in events:
            handle.write(json.dumps({"v": 1, "time": time.time(), "rank": 0, **event}) + "\n")


def sleeper(seconds: float = 120, marker: Path | None = None) -> subprocess.Popen[bytes]:
    """A plain `sleep`; with `marker`, it carries that run folder's marker as a run's process would."""
    env = dict(os.environ)
    env.pop(RUN_MARKER_ENV, None)
    if marker is not None:
        env[RUN_MARKER_ENV] = str(Path(marker).resolve())
    # SIGINT as a run's process has it (the supervisor starts the trainer so), whatever pytest inherited
    return subprocess.Popen(["sleep", str(seconds)], env=env, preexec_fn=default_terminal_signals)


def started(pid: int) -> float:
    return psutil.Process(pid).create_time()


def alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def wait_until(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    """tests/timing.py wait_until, polled often (these waits are for quick process changes)."""
    return timing.wait_until(condition, timeout, what, interval=0.05)
