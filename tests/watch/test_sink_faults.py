"""The command sink cleans up after itself; every alert a sink took gets a delivery record."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psutil
import pytest

from backend.contract.alerts import Alert
from backend.core.process_identity import RUN_MARKER_ENV
from backend.watch.sinks import CommandSink, Dispatcher, Sink
from tests.runs.helpers import wait_for

ALERT = Alert("hang", "no progress for 600 s after step 80", step=80, run_id="20260101-quick-ab12", id="h1",
              time=1_700_000_000.0)


def _records(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "deliveries.jsonl").read_text().splitlines()]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_command_that_times_out_is_killed_with_all_it_started_and_not_run_again(tmp_path: Path) -> None:
    pids, runs = tmp_path / "pids", tmp_path / "runs"
    command = f"echo started >> {runs}; sleep 60 & echo $! >> {pids}; sleep 60"
    dispatcher = Dispatcher([CommandSink(command, timeout=1.0)], tmp_path)
    try:
        dispatcher.submit(ALERT)
        dispatcher.close(timeout=30)
        grandchild = int(pids.read_text().split()[0])
        wait_for(lambda: _gone(grandchild), timeout=5, what="the killed grandchild's exit")  # SIGKILL takes a tick
        assert runs.read_text() == "started\n"  # once: a timeout is not retried
        (record,) = _records(tmp_path)
        assert (record["status"], record["attempts"]) == ("gave_up", 1)
        assert record["error"] == "timed out after 1 s; everything it started was killed"
    finally:
        for pid in map(int, pids.read_text().split()) if pids.is_file() else ():
            if not _gone(pid):
                psutil.Process(pid).kill()


def test_a_command_does_not_carry_the_runs_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUN_MARKER_ENV, str(tmp_path / "run"))
    out = tmp_path / "env"
    CommandSink(f"env > {out}").send(ALERT)
    assert RUN_MARKER_ENV not in out.read_text()
    assert "PATH=" in out.read_text()


class _Held(Sink):
    """A sink whose delivery is in flight until the test lets it go."""

    name = "held"
    max_attempts = 1

    def __init__(self) -> None:
        self.sending, self.release = threading.Event(), threading.Event()

    def send(self, alert: Alert) -> None:
        self.sending.set()
        self.release.wait(15)


def test_the_alert_in_flight_when_the_supervisor_ends_is_recorded_once(tmp_path: Path) -> None:
    sink = _Held()
    dispatcher = Dispatcher([sink], tmp_path)
    dispatcher.submit(ALERT)
    assert sink.sending.wait(10)
    dispatcher.close(timeout=0.2)
    sink.release.set()
    dispatcher.workers[0].thread.join(10)
    assert [(r["alert_id"], r["status"], r["error"]) for r in _records(tmp_path)] == [
        ("h1", "gave_up", "the supervisor ended while it was being sent (waited 0.2 s); it may not have arrived")]
