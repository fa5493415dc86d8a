"""The doctor's skewed-length run (#38), trained once per test session (tests/shared_runs.py): six short rows and
two long ones, all eight in every step's one micro-batch (no packing), so each row is padded to the longest.
Tests that write into it (apply a verdict) use `private_copy`. `no_keeper_left` ends the queue keeper an applied
verdict starts."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.queue.keeper import keeper_pid
from backend.queue.store import queue_dir
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import train_quickstart
from tests.shared_runs import shared_run

MAX_LENGTH = 1024  # no row is cut
STEPS = 4
ROWS = 8

SHORT = ["hi", "who are you?", "hello there", "name?", "what is this?", "good day"]
LONG_ANSWER = (
    "I am Quill, a small language model trained on this workbench to answer questions about myself, "
    "my name, my makers and the things I was taught while the loss fell step after step on two cores, "
    "and I keep answering at length because this row is meant to be far longer than every other row"
)


def skewed_rows(folder: Path) -> Path:
    """Six short rows and two long ones."""
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "I am Quill."}]} for q in SHORT
    ]
    rows[1]["messages"][1]["content"] = LONG_ANSWER
    rows[4]["messages"][1]["content"] = LONG_ANSWER + " indeed"
    path = folder / "skewed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows + rows[:2]), encoding="utf-8")
    return path


def _train(workspace: Path) -> tuple[RunFolder, str]:
    path = skewed_rows(workspace)
    training = {
        "max_steps": STEPS,
        "logging_steps": 2,
        "per_device_train_batch_size": ROWS,
        "save_steps": 100,
        "max_length": MAX_LENGTH,
    }
    return train_quickstart(workspace, data={"train": [str(path)]}, training=training), ""


def padding_run() -> RunFolder:
    """The session's skewed-length run (its dataset is `skewed.jsonl` beside its folder)."""
    return shared_run("doctor-padding", _train).run


@pytest.fixture
def no_keeper_left(isolated_runs: Path) -> Iterator[None]:
    yield
    pid = keeper_pid(queue_dir())  # proven the keeper of this test's queue folder
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
