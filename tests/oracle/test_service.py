"""The one child service: children die with their parent, a kill says its real cause, stderr never
blocks, cancel stops the whole process group, and the warm child answers again without a new start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from backend.core.paths import REPO_DIR
from backend.oracle import OracleCache, OracleCancelled, OracleError, ask, runner
from backend.oracle.service import WarmChild

pytestmark = pytest.mark.one_shot_oracle  # the subject is the oracle's own children (tests/warm_oracle.py)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _until_gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


PARENT = """
import sys
from pathlib import Path
from backend.oracle import OracleCache, ask, runner
if sys.argv[2] == "warm":
    runner.start_warm()
ask("echo", {"hang": True}, cache=OracleCache(Path(sys.argv[1])), progress=lambda line: print(line, flush=True),
    timeout=120)
"""


@pytest.mark.parametrize("kind", ["one-shot", "warm"])
def test_an_orphaned_child_is_gone_within_a_second_of_its_parent(tmp_path: Path, kind: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), kind], stdout=subprocess.PIPE,
                              text=True, cwd=str(REPO_DIR))
    assert parent.stdout is not None
    try:
        line = ""
        while not line.startswith("pid "):
            line = parent.stdout.readline()
            assert line, "the parent ended before its child said who it is"
        child = int(line.split()[1])
        assert not _gone(child)
        parent.kill()  # SIGKILL: the parent cleans nothing up
        parent.wait()
        assert _until_gone(child, 1.0), "the oracle child runs on after its parent was killed"
    finally:
        parent.kill()
        parent.wait()


def _hang_and(action, tmp_path: Path, **kwargs):  # type: ignore[no-untyped-def]
    """Ask a question that never answers; `action(pid)` runs once the child said its pid."""
    def progress(line: str) -> None:
        if line.startswith("pid "):
            action(int(line.split()[1]))

    return ask("echo", {"hang": True, **kwargs.pop("payload", {})}, cache=OracleCache(tmp_path),
               progress=progress, **kwargs)


def test_a_child_killed_with_sigkill_from_outside_is_said_killed_not_timed_out(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(OracleError) as info:
        _hang_and(lambda pid: os.kill(pid, signal.SIGKILL), tmp_path, timeout=30)
    message = str(info.value)
    assert "timed out" not in message
    assert "was killed by SIGKILL from outside" in message
    assert "OOM killer" in message and "out of memory" in message
    assert time.monotonic() - started < 20  # said at once, not after the timeout


def test_a_child_killed_with_sigterm_is_said_with_its_signal(tmp_path: Path) -> None:
    with pytest.raises(OracleError, match=r"was killed by SIGTERM \(signal 15\) from outside"):
        _hang_and(lambda pid: os.kill(pid, signal.SIGTERM), tmp_path, timeout=30)


def test_a_timeout_is_said_as_ours(tmp_path: Path) -> None:
    with pytest.raises(OracleError, match="timed out after 1 s"):
        _hang_and(lambda pid: None, tmp_path, timeout=1)


def test_a_cancelled_question_kills_its_childs_process_group(tmp_path: Path) -> None:
    pids: list[int] = []
    stop = threading.Event()

    def progress(line: str) -> None:
        if line.startswith(("pid ", "grandchild ")):
            pids.append(int(line.split()[1]))
        if line.startswith("pid "):
            stop.set()

    with pytest.raises(OracleCancelled, match="cancelled"):
        ask("echo", {"hang": True, "grandchild": True}, cache=OracleCache(tmp_path), progress=progress,
            cancelled=stop.is_set, timeout=30)
    grandchild, child = pids
    assert _until_gone(child, 2.0)
    assert _until_gone(grandchild, 2.0), "the child's own child (same process group) runs on"


def test_a_child_writing_more_than_a_pipe_holds_to_stderr_still_answers(tmp_path: Path) -> None:
    done: list[dict] = []
    asking = threading.Thread(target=lambda: done.append(
        ask("echo", {"stderr": 300_000}, cache=OracleCache(tmp_path), timeout=60)), daemon=True)
    asking.start()
    asking.join(30)
    assert done == [{"echo": {"stderr": 300_000}}]


def test_the_stderr_tail_of_a_failing_child_is_kept_bounded(tmp_path: Path) -> None:
    with pytest.raises(OracleError, match="asked to fail") as info:
        ask("echo", {"stderr": 300_000, "fail": "yes"}, cache=OracleCache(tmp_path), timeout=60)
    assert "last words" in info.value.detail
    assert len(info.value.detail) < 20_000


@pytest.fixture
def warm() -> object:
    runner.start_warm()
    yield runner
    runner.stop_warm()


def test_the_warm_child_answers_a_second_question_without_a_new_child(tmp_path: Path, warm: object) -> None:
    cache = OracleCache(tmp_path)
    first = ask("echo", {"who": 1}, cache=cache)
    pid = first["pid"]
    answers: list[dict] = []
    # the second question comes from a thread that ends before the third (as a TUI worker does):
    # the warm child must outlive the thread that asked (PR_SET_PDEATHSIG is per thread)
    asking = threading.Thread(target=lambda: answers.append(ask("echo", {"who": 2}, cache=cache)))
    asking.start()
    asking.join()
    time.sleep(0.3)
    answers.append(ask("echo", {"who": 3}, cache=cache))
    assert [a["pid"] for a in answers] == [pid, pid]
    assert answers[1]["echo"] == {"who": 3}
    assert not _gone(pid)


def test_a_cancelled_question_kills_the_warm_child_and_the_next_starts_a_new_one(tmp_path: Path,
                                                                              warm: object) -> None:
    cache = OracleCache(tmp_path)
    before = ask("echo", {"who": "before"}, cache=cache)["pid"]
    stop = threading.Event()
    with pytest.raises(OracleCancelled):
        _hang_and(lambda pid: stop.set(), tmp_path, cancelled=stop.is_set, timeout=30)
    assert _until_gone(before, 2.0)
    after = ask("echo", {"who": "after"}, cache=cache)["pid"]
    assert after != before and not _gone(after)


def test_stopping_the_warm_child_ends_it(tmp_path: Path) -> None:
    runner.start_warm()
    pid = ask("echo", {"who": "stop"}, cache=OracleCache(tmp_path))["pid"]
    runner.stop_warm()
    assert _until_gone(pid, 2.0)
    assert ask("echo", {"who": "one-shot"}, cache=OracleCache(tmp_path))["pid"] != pid  # a one-shot child


def test_a_warm_child_handed_over_is_used_and_handed_back_running(tmp_path: Path) -> None:
    kept = WarmChild()  # kept by a process across several apps (the tests: tests/warm_oracle.py)
    try:
        assert runner.use_warm(kept) is None
        pid = ask("echo", {"who": "kept"}, cache=OracleCache(tmp_path))["pid"]
        assert runner.use_warm(None) is kept
        assert not _gone(pid)  # handed back, not stopped
        assert ask("echo", {"who": "one-shot"}, cache=OracleCache(tmp_path))["pid"] != pid
        assert kept.pid == pid
    finally:
        runner.use_warm(None)
        kept.stop()


def test_the_warm_child_takes_the_workbench_folders_with_each_question_and_restarts_for_the_rest(
        tmp_path: Path, warm: object, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = OracleCache(tmp_path)
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "first"))
    first = ask("echo", {"env": "WORKBENCH_WORKSPACE"}, cache=cache)
    assert first["value"] == str(tmp_path / "first")
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "second"))  # read by our code when called: no restart
    second = ask("echo", {"env": "WORKBENCH_WORKSPACE", "asked": 2}, cache=cache)  # (answers are cached by payload)
    assert (second["pid"], second["value"]) == (first["pid"], str(tmp_path / "second"))
    monkeypatch.delenv("WORKBENCH_WORKSPACE")
    assert ask("echo", {"env": "WORKBENCH_WORKSPACE", "asked": 3}, cache=cache) == {"value": None,
                                                                                   "pid": first["pid"]}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a library's, read as it is imported: a new child
    third = ask("echo", {"env": "HF_HUB_OFFLINE"}, cache=cache)
    assert third["pid"] != first["pid"] and third["value"] == "1"
