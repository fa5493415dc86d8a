"""The hang detector and the start-up phases (#39 with #35's `phase` event): a slow model load is no hang."""

from __future__ import annotations

from backend.contract.events import Phase, RunBegin
from backend.watch.progress_detectors import HangDetector


def test_the_start_up_phases_before_run_begin_arm_no_hang() -> None:
    """Loading the model (the `phase` event before run_begin) can take minutes: no hang is timed from it (the
    SIGSTOP watchdog test alerted "no progress for 8 s before the first step" during a slow model load)."""
    detector = HangDetector(factor=3.0, min_seconds=8.0)
    detector.on_event(Phase(phase="model"), now=100.0)
    assert detector.on_tick(200.0) == []
    detector.on_event(RunBegin(), now=200.0)
    assert [f.message for f in detector.on_tick(209.0)] == ["no progress for 9 s before the first step (limit 8 s)"]
