"""Shared test set-up: an isolated workbench home per session, and the tiny model built once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cache, data and workspace folders of this test session (never the user's own). The parallel
    workers of one session (pytest-xdist) share the cache: the tiny model and the library answers are
    built once (their builders wait for each other on a file lock and write atomically)."""
    root = tmp_path_factory.mktemp("workbench")
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    os.environ["WORKBENCH_CACHE_DIR"] = str(shared / "cache")
    os.environ["WORKBENCH_DATA_DIR"] = str(root / "data")
    os.environ["WORKBENCH_WORKSPACE"] = str(root / "runs")
    os.environ["WORKBENCH_CONFIG_DIR"] = str(root / "config")  # never the user's own notify.toml
    return root


@pytest.fixture(scope="session", autouse=True)
def lifecycle_installed() -> None:
    """What the CLI and the TUI do as they start: the run registry's `run:` lookup and the
    watch/output_dir validation rules registered with the floors below (backend.cli.wiring)."""
    from backend.cli.wiring import install

    install()


@pytest.fixture(scope="session")
def tiny_model(workbench_home: Path) -> Path:
    """The embedded tiny Qwen2, built once per test session (about 5 s)."""
    from backend.models.demo.build import ensure_builtin_model

    return ensure_builtin_model("tiny-qwen2")


@pytest.fixture(scope="session")
def short_lora_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Four LoRA steps of the quickstart profile with 10 % of its rows held out as swift's validation
    split: a real checkpoint (checkpoint-4), its base model and swift's val_dataset.jsonl. Shared by
    the chat screen and batch-inference tests (one swift start-up instead of two); they only read it
    and add jobs of their own kind."""
    from tests.jobs.jobs_helpers import train_quickstart

    return train_quickstart(tmp_path_factory.mktemp("short-lora-run"), data={"split_dataset_ratio": 0.1},
                            training={"max_steps": 4, "save_steps": 4})


@pytest.fixture
def isolated_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A run index and workspace of this test alone (the model cache stays shared).

    Whatever the test's outcome, no run it started outlives it: a failed assertion must not leave
    an endless training eating the machine's two cores."""
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "runs"))
    yield tmp_path / "runs"
    from backend.core.process_identity import run_processes
    from backend.rundir.layout import RunFolder
    from backend.rundir.process import signal_processes

    workspace = tmp_path / "runs"
    for folder in workspace.iterdir() if workspace.is_dir() else ():
        leftovers = run_processes(RunFolder(folder).path)
        if leftovers:
            signal_processes(leftovers, signal.SIGKILL)
