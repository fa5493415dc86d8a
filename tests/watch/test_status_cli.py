"""`workbench status --line` and `workbench inbox` over hand-made run folders (the file protocol)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.core.process_identity import RUN_MARKER_ENV
from backend.rundir import index
from backend.watch import inbox


@dataclass(frozen=True)
class Said:
    """What one `workbench` command printed and how it ended."""

    stdout: str
    stderr: str
    returncode: int


def _cli(*args: str) -> Said:
    """`workbench ARGS` in this process (the commands, not a fresh interpreter, are the subject here); an
    uncaught exception is written into stderr as the traceback a user would see."""
    result = CliRunner().invoke(full_app(), list(args))
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
    return Said(result.stdout, stderr, result.exit_code)


def _run(workspace: Path, name: str, status: str, supervisor_pid: int | None, created: float,
         logs: list[dict] = (), alerts: list[dict] = ()) -> Path:
    folder = workspace / name
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({
        "run_id": name, "profile_name": name.split("-")[0], "status": status, "host": socket.gethostname(),
        "supervisor_pid": supervisor_pid, "created_at": created}))
    (folder / "events.jsonl").write_text("".join(json.dumps({"v": 1, "type": "log", "rank": 0, "time": 1.0, **e}) + "\n"
                                                 for e in logs))
    if alerts:
        (folder / "alerts.jsonl").write_text("".join(json.dumps({"v": 1, "type": "alert", **a}) + "\n" for a in alerts))
    return folder


def _supervisor(folder: Path) -> subprocess.Popen[bytes]:
    """A stand-in for the run's supervisor: alive and carrying the run's marker, recorded in state.json."""
    keeper = subprocess.Popen(["sleep", "120"], env={**os.environ, RUN_MARKER_ENV: str(folder.resolve())})
    state = json.loads((folder / "state.json").read_text())
    state.update(supervisor_pid=keeper.pid, supervisor_started=psutil.Process(keeper.pid).create_time())
    (folder / "state.json").write_text(json.dumps(state))
    return keeper


@pytest.fixture
def runs(isolated_runs: Path) -> Iterator[Path]:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    quick = _run(isolated_runs, "quick-a", "running", None, 100.0,
                 logs=[{"step": 119, "max_steps": 400, "loss": 1.5, "steps_per_second": 2.0},
                       {"step": 120, "max_steps": 400, "loss": 1.2345, "steps_per_second": 2.0},
                       {"step": 120, "max_steps": 400, "loss": 9.0, "steps_per_second": 2.0, "rank": 1}])
    keeper = _supervisor(quick)
    _run(isolated_runs, "lost-b", "running", dead.pid, 90.0)
    _run(isolated_runs, "big-c", "failed", None, 80.0,
         alerts=[{"id": "x1", "kind": "hang", "step": 800, "time": 1_790_000_000.0, "message": "no progress for 600 s"},
                 {"id": "x2", "kind": "failed", "step": 812, "time": 1_790_000_100.0,
                  "message": "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory."}])
    yield isolated_runs
    keeper.kill()
    keeper.wait()


def test_a_live_pid_that_is_not_the_runs_supervisor_is_said_gone(isolated_runs: Path) -> None:
    _run(isolated_runs, "planted-g", "running", os.getpid(), 100.0)  # alive, but no marker of the run
    assert _cli("status", "--line").stdout == "planted ?\n"


def test_a_supervisor_recorded_before_this_host_rebooted_is_said_gone(isolated_runs: Path) -> None:
    folder = _run(isolated_runs, "old-h", "running", None, 100.0)
    keeper = _supervisor(folder)  # its pid is alive and even carries the marker: a pid of this boot
    try:
        state = json.loads((folder / "state.json").read_text())
        (folder / "state.json").write_text(json.dumps({**state, "boot_id": "an-earlier-boot"}))
        assert _cli("status", "--line").stdout == "old ?\n"
    finally:
        keeper.kill()
        keeper.wait()


def test_status_line_then_inbox_marks_seen(runs: Path) -> None:
    assert _cli("status", "--line").stdout == "quick 120/400 loss 1.23 eta 2m20s | lost ? | ! 2 new (failed)\n"
    result = _cli("inbox")
    assert result.returncode == 0
    hang_time = time.strftime("%Y-%m-%d %H:%M", time.localtime(1_790_000_000.0))
    lines = result.stdout.splitlines()
    assert lines[0] == f"{hang_time}  big-c hang at step 800: no progress for 600 s"
    assert lines[1].endswith("  big-c failed at step 812: CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.")
    assert len(lines) == 2
    assert _cli("inbox").stdout == "nothing new\n"
    assert _cli("status", "--line").stdout == "quick 120/400 loss 1.23 eta 2m20s | lost ?\n"
    # a new alert after the mark is new again, and only it
    with open(runs / "big-c" / "alerts.jsonl", "a") as handle:
        handle.write(json.dumps({"v": 1, "type": "alert", "id": "x3", "kind": "disk", "step": None, "time": 2e9,
                                 "message": "disk low"}) + "\n")
    assert _cli("status", "--line").stdout.endswith("| ! 1 new (disk)\n")
    assert [json.loads(line)["id"] for line in _cli("inbox", "--json", "--peek").stdout.splitlines()] == ["x3"]
    assert _cli("inbox", "--all", "--peek").stdout.count("big-c") == 3


def test_text_from_files_never_acts_on_the_terminal(isolated_runs: Path) -> None:
    _run(isolated_runs, "evil-f", "failed", None, 1.0,
         alerts=[{"id": "e", "kind": "failed", "step": 1, "time": 1.0, "message": "boom\x1b[2J\u202eevil"}])
    assert _cli("status", "--line").stdout == "! 1 new (failed)\n"
    assert _cli("inbox").stdout.endswith("evil-f failed at step 1: boom\\x1b[2J\\u202eevil\n")


def test_status_line_is_empty_when_nothing_runs_and_all_is_seen(isolated_runs: Path) -> None:
    _run(isolated_runs, "old-d", "finished", None, 1.0)
    assert _cli("status", "--line").stdout == "\n"


def test_light_folder_scan_agrees_with_the_run_index(runs: Path, tmp_path: Path) -> None:
    elsewhere = _run(tmp_path / "elsewhere", "far-e", "finished", None, 5.0)
    index.register(elsewhere)
    assert sorted(inbox.run_folders()) == sorted(index.known_folders())
    assert len(inbox.run_folders()) == 4


# ---------------------------------------------------------------- wrong-typed values (#29 Medium 8)


def test_wrong_typed_alerts_are_skipped_and_said_and_the_rest_marked_seen(isolated_runs: Path) -> None:
    _run(isolated_runs, "odd-k", "failed", None, 1.0,
         alerts=[{"id": "a", "kind": "hang", "step": 3, "time": "yesterday", "message": "no progress"},
                 {"id": "b", "kind": "hang", "step": 4, "time": 1e300, "message": "no progress"},
                 {"id": "c", "kind": "failed", "step": 5, "time": 1_790_000_000.0, "message": "boom"}])
    assert _cli("status", "--line").stdout == "! 1 new (failed) | ! 2 damaged alert lines\n"
    result = _cli("inbox")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"damaged: {isolated_runs / 'odd-k' / 'alerts.jsonl'}: 2 lines (field time is not a time: yesterday); skipped",
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(1_790_000_000.0))}  odd-k failed at step 5: boom"]
    assert _cli("inbox").stdout == "nothing new\n"
    assert _cli("status", "--line").stdout == "\n"


def test_a_negative_seen_mark_is_no_mark(isolated_runs: Path) -> None:
    _run(isolated_runs, "mark-m", "failed", None, 1.0,
         alerts=[{"id": "c", "kind": "failed", "step": 5, "time": 1_790_000_000.0, "message": "boom"}])
    seen = isolated_runs.parent / "data" / "inbox_seen.json"
    seen.parent.mkdir(parents=True, exist_ok=True)
    seen.write_text(json.dumps({str(isolated_runs / "mark-m"): -7}))
    assert _cli("status", "--line").stdout == "! 1 new (failed)\n"
    assert _cli("inbox").stdout.endswith("  mark-m failed at step 5: boom\n")


def test_a_damaged_running_state_is_said_damaged_not_shown_running(isolated_runs: Path) -> None:
    folder = _run(isolated_runs, "bent-n", "running", None, 100.0)
    (folder / "state.json").write_text(json.dumps({"run_id": "bent-n", "status": "running", "profile_name": "bent",
                                                   "created_at": "noon", "supervisor_pid": "12"}))
    _run(isolated_runs, "other-o", "running", None, 90.0)
    assert _cli("status", "--line").stdout == "other running | bent-n damaged\n"


def test_inbox_on_a_read_only_data_dir_says_so_in_one_line(isolated_runs: Path) -> None:
    _run(isolated_runs, "ro-p", "failed", None, 1.0,
         alerts=[{"id": "c", "kind": "failed", "step": 5, "time": 1_790_000_000.0, "message": "boom"}])
    data = isolated_runs.parent / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "inbox_seen.json").mkdir()  # cannot be replaced by a file: as a read-only or full data dir
    result = _cli("inbox")
    assert result.returncode == 1
    assert result.stdout.endswith("  ro-p failed at step 5: boom\n")
    assert result.stderr.startswith("error: could not mark these seen: [Errno ")
    assert "Traceback" not in result.stderr
    assert not [path.name for path in data.iterdir() if path.name.startswith(".inbox_seen")]  # no half-written file
