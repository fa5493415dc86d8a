"""A caller that stops waiting stops the child: `ask(..., cancelled=...)` kills it and caches nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
import pytest

from backend.oracle import OracleCache, OracleCancelled, ask

pytestmark = pytest.mark.one_shot_oracle  # the subject is the oracle's own children (tests/warm_oracle.py)


def test_cancelling_kills_the_child_and_caches_nothing(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path)
    pids: list[int] = []
    stop = threading.Event()

    def progress(line: str) -> None:
        if line.startswith("pid "):
            pids.append(int(line.split()[1]))
            stop.set()  # the child is running and will never answer: the caller gives up now

    with pytest.raises(OracleCancelled, match="cancelled"):
        ask("echo", {"hang": True}, cache=cache, progress=progress, cancelled=stop.is_set, timeout=30)
    (pid,) = pids
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not list(tmp_path.rglob("*.json"))  # nothing cached


def test_a_caller_cancelled_before_the_start_starts_no_child(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(OracleCancelled):
        ask("echo", {"x": 1}, cache=cache, cancelled=lambda: True)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
