"""The watchdog's end: one poller only, also when its thread is slow to come back from a poll."""

from __future__ import annotations

import threading
from pathlib import Path

from backend.rundir.layout import RunFolder
from backend.watch.config import WatchSection
from backend.watch.watchdog import Watchdog


class _Counted(Watchdog):
    """A watchdog whose first poll hangs until released, counting the polls running at once."""

    def __init__(self, run: RunFolder) -> None:
        super().__init__(run, None, WatchSection(stop_grace_seconds=0))
        self.inside, self.most, self.finals = 0, 0, 0
        self.lock = threading.Lock()
        self.first, self.release = threading.Event(), threading.Event()

    def poll(self, now: float, ticks: bool = True) -> list:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.finals += not ticks
        try:
            if ticks and not self.first.is_set():
                self.first.set()
                self.release.wait(30)
            return super().poll(now, ticks)
        finally:
            with self.lock:
                self.inside -= 1


def test_finish_never_polls_beside_a_poll_still_running(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    run.write_state(run.new_state("dog").model_copy(update={"status": "finished"}))
    dog = _Counted(run).start()
    assert dog.first.wait(10)
    # the thread's poll outlasts what finish used to wait for it (stop_grace_seconds * 2 + 10 s)
    threading.Timer(10.5, dog.release.set).start()
    dog.finish(timeout=5)
    assert (dog.most, dog.finals) == (1, 1)
    assert [alert.kind for alert in dog.raised] == ["finished"]
