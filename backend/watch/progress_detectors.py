"""Detectors of progress, fed events and the time: a hang (no step for much longer than the steps took)
and throughput falling below the run's own pace."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable

from backend.contract.events import Checkpoint, Eval, Event, Phase, RunBegin, RunEnd
from backend.watch.finding import Finding, rank0_log


class HangDetector:
    """No new step for max(factor x the median time between logged steps, min_seconds).

    Armed once the trainer has begun (`run_begin`), disarmed by `run_end`; until two logged steps
    give a median, only the floor applies. A checkpoint or evaluation record counts as progress too,
    and so does what the watchdog reports through `note_progress`."""

    kind = "hang"

    def __init__(self, factor: float, min_seconds: float):
        self.factor, self.min_seconds = factor, min_seconds
        self.last_progress: float | None = None
        self.last_step: int | None = None
        self._last_log: tuple[float, int] | None = None
        self._intervals: deque[float] = deque(maxlen=50)
        self._step_times: deque[float] = deque(maxlen=50)
        self._raised = False

    def note_progress(self, when: float) -> None:
        """Progress seen elsewhere (the trainer's heartbeat, a checkpoint being written)."""
        if self.last_progress is not None and when > self.last_progress:
            self.last_progress = when
            self._raised = False

    def on_event(self, event: Event, now: float) -> None:
        if event.rank != 0:
            return
        if isinstance(event, RunEnd):
            self.last_progress = None  # training is over: what follows (saving, exiting) is not a hang
            return
        if isinstance(event, Phase):
            return  # the start-up phases before run_begin (loading a model can take minutes) arm nothing
        self.last_progress = now
        self._raised = False
        if isinstance(event, RunBegin):
            self._last_log = None
        log = rank0_log(event)
        if log is None or log.step is None:
            return
        # steps are timed by the trainer's own clock: lines read in one poll are not 0 s apart
        step, logged = log.step, log.time if log.time > 0 else now
        if self._last_log is not None and step > self._last_log[1]:
            interval = max(0.0, logged - self._last_log[0])
            self._intervals.append(interval)
            self._step_times.append(interval / (step - self._last_log[1]))
        self._last_log = (logged, step)
        self.last_step = step

    def threshold(self) -> float:
        if not self._intervals:
            return self.min_seconds
        return max(self.factor * statistics.median(self._intervals), self.min_seconds)

    def on_tick(self, now: float) -> list[Finding]:
        if self.last_progress is None or self._raised:
            return []
        silent = now - self.last_progress
        limit = self.threshold()
        if silent <= limit:
            return []
        self._raised = True
        median_step = statistics.median(self._step_times) if self._step_times else None
        where = f"after step {self.last_step}" if self.last_step is not None else "before the first step"
        return [Finding(self.kind, f"no progress for {silent:.0f} s {where} (limit {limit:.0f} s)", self.last_step,
                        {"silent_seconds": round(silent, 2), "limit_seconds": round(limit, 2),
                         "median_step_seconds": median_step,
                         "median_log_interval_seconds": statistics.median(self._intervals) if self._intervals else None,
                         "hang_factor": self.factor, "hang_min_seconds": self.min_seconds})]


class ThroughputDetector:
    """steps/s below `fraction` of its median for `window` log records in a row. The record after
    a checkpoint or an evaluation (its interval includes the save) and the first one are ignored, and so
    are the records while a job of the run's own runs beside it (`beside`: golden prompts, swift eval, which
    share its CPU or GPU) and the one after; after an alert, it re-arms only once the speed was normal for
    10 x `window` records."""

    kind = "throughput"

    def __init__(self, fraction: float, window: int, min_history: int = 5,
                 beside: Callable[[], bool] | None = None):
        self.fraction, self.window, self.min_history = fraction, window, min_history
        self.beside = beside
        self._history: deque[float] = deque(maxlen=200)
        self._skip_next = True
        self._low = 0
        self._normal = 0
        self._raised = False

    def on_event(self, event: Event) -> list[Finding]:
        if isinstance(event, (RunBegin, Checkpoint, Eval)) and event.rank == 0:
            self._skip_next = True
            return []
        log = rank0_log(event)
        if log is None or not log.steps_per_second:
            return []
        speed = log.steps_per_second
        if self.beside is not None and self.beside():
            self._skip_next, self._low = True, 0  # the record after the job still holds some of its time
            return []
        if self._skip_next:
            self._skip_next = False
            return []
        median = statistics.median(self._history) if len(self._history) >= self.min_history else None
        self._history.append(speed)
        if median is None:
            return []
        if speed >= self.fraction * median:
            self._low = 0
            self._normal += 1
            if self._normal >= 10 * self.window:  # re-armed only after a long spell of normal speed
                self._raised = False
            return []
        self._low += 1
        self._normal = 0
        if self._low < self.window or self._raised:
            return []
        self._raised = True
        return [Finding(self.kind, f"throughput fell to {speed:.3g} steps/s, {speed / median:.0%} of its median "
                                   f"{median:.3g} for {self._low} records", log.step,
                        {"steps_per_second": speed, "median_steps_per_second": median, "fraction": self.fraction,
                         "records_below": self._low, "tokens_per_second": log.tokens_per_second})]
