"""The hang limit is factor x the MEDIAN time between logged steps: with uneven spacing (one slow step
among quick ones) the median and the mean differ, and only the median's limit is right."""

from __future__ import annotations

import msgspec

from backend.contract.events import Event
from backend.watch.progress_detectors import HangDetector


def log(step: int) -> Event:
    return msgspec.convert({"type": "log", "rank": 0, "step": step, "nonfinite": []}, Event)


def test_one_slow_step_among_quick_ones_does_not_stretch_the_hang_limit() -> None:
    d = HangDetector(factor=10.0, min_seconds=5.0)
    d.on_event(msgspec.convert({"type": "run_begin", "rank": 0}, Event), now=0.0)
    # intervals 2, 1, 60 (an evaluation pause), 3 s: median 2.5 s; the mean would be 16.5 s
    for step, t in [(1, 10.0), (2, 12.0), (3, 13.0), (4, 73.0), (5, 76.0)]:
        d.on_event(log(step), now=t)
    assert d.threshold() == 25.0  # 10 x 2.5 s (the mean would give 165 s)
    assert d.on_tick(76.0 + 24.9) == []
    found = d.on_tick(76.0 + 26.0)
    assert [(f.step, f.evidence["limit_seconds"], f.evidence["median_log_interval_seconds"]) for f in found] == [
        (5, 25.0, 2.5)]
    assert found[0].message == "no progress for 26 s after step 5 (limit 25 s)"


def test_an_odd_number_of_uneven_intervals_takes_the_middle_one() -> None:
    d = HangDetector(factor=4.0, min_seconds=1.0)
    # intervals 1, 7, 1 s: median 1 s (mean 3 s)
    for step, t in [(10, 0.0), (11, 1.0), (12, 8.0), (13, 9.0)]:
        d.on_event(log(step), now=t)
    assert d.threshold() == 4.0
    assert [f.kind for f in d.on_tick(9.0 + 4.5)] == ["hang"]
