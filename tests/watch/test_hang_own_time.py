"""Hang detection times steps by the events' own `time`, not by when the watchdog read them."""

from __future__ import annotations

import json
from pathlib import Path

from backend.rundir.layout import RunFolder
from backend.watch.config import WatchSection
from backend.watch.watchdog import Watchdog

START = 1_700_000_000.0


def test_a_bursty_step_log_read_in_one_poll_gives_the_limit_from_the_steps_own_times(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    run.write_state(run.new_state("bursty").model_copy(update={"status": "running"}))
    dog = Watchdog(run, None, WatchSection(hang_factor=3.0, hang_min_seconds=1.0, actions={"hang": "alert"}))
    lines = [{"v": 1, "type": "run_begin", "rank": 0, "time": START}]
    lines += [{"v": 1, "type": "log", "rank": 0, "step": step, "time": START + step, "nonfinite": []}
              for step in (10, 20, 30)]  # a step every second, logged every 10 steps: 10 s apart
    run.events_path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    def hangs(now: float) -> list[str]:
        return [alert.message for alert in dog.poll(now) if alert is not None and alert.kind == "hang"]

    assert hangs(START + 31) == []  # all four lines in this one poll
    assert hangs(START + 31 + 29) == []  # 29 s of silence: under 3 x 10 s
    assert hangs(START + 31 + 31) == ["no progress for 31 s after step 30 (limit 30 s)"]
