"""Detectors: small pure state machines over the events stream and over readings of the machine.

Each one is fed events (`on_event`) and/or readings (`on_tick`, `on_sample`) with the time
passed in, and returns `Finding`s. A detector raises a condition once and re-arms only after the
condition cleared, so a run that stays NaN or stays short of disk gives one alert, not hundreds.
They know nothing about files, threads or processes: the watchdog does that, and the tests drive
them with hand-written numbers.

By family: loss_detectors.py (the training signal), progress_detectors.py (hang, throughput),
machine_detectors.py (GPU memory, host RAM, disk), memory_detectors.py (creep at equal length); what they return is finding.py's Finding. The
event-fed ones a run watches are listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.watch.config import WatchSection
from backend.watch.loss_detectors import DivergenceDetector, LossScaleDetector, NonfiniteDetector, OverfitDetector
from backend.watch.memory_detectors import MemoryCreepDetector
from backend.watch.progress_detectors import ThroughputDetector


def event_detectors(config: WatchSection, beside: Callable[[], bool] | None = None) -> list[Any]:
    """The detectors fed from events.jsonl, in the order they run (`beside`: whether a job of the run's own
    runs beside it now, see ThroughputDetector)."""
    found: list[Any] = []
    if config.nonfinite:
        found.append(NonfiniteDetector())
    found += [DivergenceDetector(config.divergence_factor, config.divergence_window),
              LossScaleDetector(config.loss_scale_min, config.overflow_run),
              ThroughputDetector(config.throughput_fraction, config.throughput_window, beside=beside),
              OverfitDetector(config.overfit_evals), MemoryCreepDetector(config.creep_min_mib, config.creep_min_steps)]
    return found
