"""Issue #29, Medium 12: hostile dataset files. A FIFO named x.jsonl hung validate, run and data inspect
(open() in the cache key's read); a symlink loop ended data inspect in a traceback; a 40 MiB one-line file
and a 50,000-deep row went to swift whole (GBs of RAM, a segfault). Each is refused by name, at once,
with the line: "too long" / "too deep"."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.data.first_look import inspect_ref
from backend.launch.validate import validate
from backend.profile import load_profile
from tests.fakes import CPU_BOX
from tests.timing import scaled

LONG = "line 1 is longer than 32.0 MiB: too long to read as one row"
DEEP = "line 2 is nested deeper than 100 levels: too deep"


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[dict[str, Path]]:
    files = {name: tmp_path / f"{name}.jsonl" for name in ("fifo", "loop", "long", "deep")}
    os.mkfifo(files["fifo"])
    files["loop"].symlink_to(files["loop"].name)
    with open(files["long"], "wb") as handle:  # one sparse 40 MiB line: no newline anywhere
        handle.truncate(40 * 2**20)
    files["deep"].write_text('{"messages": []}\n{"messages": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    yield files
    _unblock(files["fifo"])


def _unblock(fifo: Path) -> None:
    """Let a reader stuck in open() of the FIFO go (old code): open it for writing once, without blocking."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader waiting


def _within(seconds: float, call: Callable[[], Any], fifo: Path) -> Any:
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _unblock(fifo)
        worker.join(5)
        pytest.fail(f"still waiting after {seconds} s")
    return result[0]


def _data_errors(path: Path, ask_data: bool) -> list[str]:
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.data.train = [str(path)]
    return [p.message for p in validate(profile, CPU_BOX, base_dir=SHIPPED_PROFILES_DIR, ask_data=ask_data)
            if p.field == "data.train" and p.severity == "error"]


@pytest.mark.parametrize("name, says", [("fifo", "is a FIFO (named pipe), not a regular file: reading it could "
                                                 "wait forever."),
                                        ("loop", "is a symbolic link loop.")])
def test_validate_refuses_what_is_not_a_regular_file_at_once(hostile: dict[str, Path], name: str,
                                                             says: str) -> None:
    for ask_data in (False, True):
        found = _within(30, functools.partial(_data_errors, hostile[name], ask_data), hostile["fifo"])
        assert found == [f"{hostile[name]} {says}"]


@pytest.mark.parametrize("name, says", [("long", LONG), ("deep", DEEP)])
def test_validate_refuses_a_line_too_long_or_too_deep_before_swift_reads_it(hostile: dict[str, Path], name: str,
                                                                           says: str) -> None:
    assert _data_errors(hostile[name], ask_data=True) == [f"{hostile[name]}: {says}."]


@pytest.mark.parametrize("name, says", [("fifo", "is a FIFO (named pipe)"), ("loop", "is a symbolic link loop"),
                                        ("long", LONG), ("deep", DEEP)])
def test_data_inspect_says_what_the_file_is_and_exits_2(hostile: dict[str, Path], name: str, says: str) -> None:
    try:
        done = subprocess.run([sys.executable, "-m", "backend.cli", "data", "inspect", str(hostile[name])],
                              capture_output=True, text=True, timeout=scaled(60))
    except subprocess.TimeoutExpired:
        pytest.fail("data inspect still waiting after 60 s")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {hostile[name]}") and says in done.stderr, done.stderr


@pytest.mark.parametrize("name, says", [("fifo", "is a FIFO (named pipe)"), ("loop", "is a symbolic link loop"),
                                        ("long", LONG), ("deep", DEEP)])
def test_the_data_tabs_first_look_says_it_too(hostile: dict[str, Path], name: str, says: str) -> None:
    report = _within(30, lambda: inspect_ref(str(hostile[name])), hostile["fifo"])
    said = report.problem or (report.scan.unreadable if report.scan else "")
    assert says in said, said
