"""Detectors: small pure state machines over the events stream and over readings of the machine.

Each one is fed events (`on_event`) and/or readings (`on_tick`, `on_sample`) with the time
passed in, and returns `Finding`s. A detector raises a condition once and re-arms only after the
condition cleared, so a run that stays NaN or stays short of disk gives one alert, not hundreds.
They know nothing about files, threads or processes: the watchdog does that, and the tests drive
them with hand-written numbers.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from backend.events import Checkpoint, Eval, Event, Log, RunBegin, RunEnd
from backend.units import size
from backend.watch.config import WatchSection


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _rank0_log(event: Event) -> Log | None:
    """The event when it is a rank-0 log with a step (what most detectors follow)."""
    return event if isinstance(event, Log) and event.rank == 0 and event.step is not None else None


class NonfiniteDetector:
    """The loss NaN/inf on any rank; the grad norm too when no fp16 loss scaler is there to skip
    such steps (with a scaler a non-finite grad norm is just an overflowed, skipped step).

    transformers hides a NaN loss from the logged average by default (`logging_nan_inf_filter`),
    so once the weights are NaN it is the grad norm that says so on an fp32/bf16 run."""

    kind = "nonfinite"

    def __init__(self) -> None:
        self.has_scaler = False
        self._raised = False

    def on_event(self, event: Event) -> list[Finding]:
        if isinstance(event, RunBegin):
            self.has_scaler = bool(event.scaler)
            return []
        if not isinstance(event, Log):
            return []
        names = [n for n in event.nonfinite if n == "loss" or (n == "grad_norm" and not self.has_scaler)]
        if not names:
            if event.loss is not None:
                self._raised = False
            return []
        if self._raised:
            return []
        self._raised = True
        step = event.step
        return [Finding(self.kind, f"{' and '.join(names)} became NaN/inf at step {step} (rank {event.rank})",
                        step, {"nonfinite": names, "rank": event.rank, "loss": event.loss,
                               "grad_norm": event.grad_norm, "learning_rate": event.learning_rate})]


class DivergenceDetector:
    """The loss EMA rose by `factor` over its lowest value within the last `window` steps.

    One alert per episode, and at most one per `window` steps: a noisy loss that crosses the
    threshold back and forth is one divergence, not an alert every few steps."""

    kind = "divergence"

    def __init__(self, factor: float, window: int, alpha: float = 0.1, min_points: int = 5):
        self.factor, self.window, self.alpha, self.min_points = factor, window, alpha, min_points
        self.ema: float | None = None
        self._history: deque[tuple[int, float]] = deque()
        self._points = 0
        self._raised = False
        self._last_alert_step: int | None = None

    def on_event(self, event: Event) -> list[Finding]:
        log = _rank0_log(event)
        if log is None or log.loss is None or log.step is None:
            return []
        step, loss = log.step, log.loss
        self.ema = loss if self.ema is None else self.alpha * loss + (1 - self.alpha) * self.ema
        self._points += 1
        while self._history and self._history[0][0] < step - self.window:
            self._history.popleft()
        lowest = min((ema for _, ema in self._history), default=self.ema)
        self._history.append((step, self.ema))
        if self._points < self.min_points or lowest <= 0:
            return []
        rising = self.ema > self.factor * lowest
        if not rising:
            self._raised = False
            return []
        recent = self._last_alert_step is not None and step - self._last_alert_step < self.window
        if self._raised or recent:
            return []
        self._raised, self._last_alert_step = True, step
        return [Finding(self.kind, f"loss is diverging: its EMA rose from {lowest:.4g} to {self.ema:.4g} "
                                   f"(x{self.ema / lowest:.1f}) within {self.window} steps", step,
                        {"ema": self.ema, "lowest_ema_in_window": lowest, "factor": self.factor,
                         "window_steps": self.window, "loss": loss})]


class LossScaleDetector:
    """fp16 dynamic loss scale: below a floor, or `overflow_run` overflowed steps in a row.

    `overflow_count` is cumulative; when it grew by as much as the step between two records,
    every step in between overflowed."""

    kind = "loss_scale"

    def __init__(self, minimum: float, overflow_run: int):
        self.minimum, self.overflow_run = minimum, overflow_run
        self._prev: tuple[int, int] | None = None
        self.run_length = 0
        self._run_start: int | None = None
        self._raised_floor = False
        self._raised_run = False

    def on_event(self, event: Event) -> list[Finding]:
        log = _rank0_log(event)
        if log is None or log.loss_scale is None or log.step is None:
            return []
        step, scale, count = log.step, log.loss_scale, log.overflow_count or 0
        found = self._overflow_run(step, count)
        if scale < self.minimum and not self._raised_floor:
            self._raised_floor = True
            found.append(Finding(self.kind, f"loss scale collapsed to {scale:g} (below {self.minimum:g}) at step {step}",
                                 step, {"loss_scale": scale, "floor": self.minimum, "overflow_count": count}))
        elif scale >= self.minimum:
            self._raised_floor = False
        return found

    def _overflow_run(self, step: int, count: int) -> list[Finding]:
        prev, self._prev = self._prev, (step, count)
        if prev is None:
            # from the start of training: the first record covers steps 1..step
            prev = (0, 0)
        steps, overflows = step - prev[0], count - prev[1]
        if steps <= 0:
            return []
        if overflows >= steps:
            if self.run_length == 0:
                self._run_start = prev[0] + 1
            self.run_length += steps
        else:
            self.run_length, self._run_start, self._raised_run = 0, None, False
            return []
        if self.run_length < self.overflow_run or self._raised_run:
            return []
        self._raised_run = True
        return [Finding(self.kind, f"{self.run_length} overflowed steps in a row (steps {self._run_start}-{step}): "
                                   f"every one was skipped", step,
                        {"overflows_in_a_row": self.run_length, "first_step": self._run_start, "last_step": step,
                         "overflow_count": count, "limit": self.overflow_run})]


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
        self.last_progress = now
        self._raised = False
        if isinstance(event, RunBegin):
            self._last_log = None
        log = _rank0_log(event)
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
    a checkpoint or an evaluation (its interval includes the save) and the first one are ignored;
    after an alert, it re-arms only once the speed was normal for 10 x `window` records."""

    kind = "throughput"

    def __init__(self, fraction: float, window: int, min_history: int = 5):
        self.fraction, self.window, self.min_history = fraction, window, min_history
        self._history: deque[float] = deque(maxlen=200)
        self._skip_next = True
        self._low = 0
        self._normal = 0
        self._raised = False

    def on_event(self, event: Event) -> list[Finding]:
        if isinstance(event, (RunBegin, Checkpoint, Eval)) and event.rank == 0:
            self._skip_next = True
            return []
        log = _rank0_log(event)
        if log is None or not log.steps_per_second:
            return []
        speed = log.steps_per_second
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


class OverfitDetector:
    """The eval loss rose at `evals` evaluations in a row while the train loss fell: overfitting.

    The train loss of an evaluation is the mean of the rank-0 losses logged since the one before (one
    logged loss is too noisy to say "fell"); it fell when the streak's last one is below the one at the
    evaluation where the streak began. Raised once per streak; an evaluation that does not rise re-arms it."""

    kind = "overfit"

    def __init__(self, evals: int, key: str = "eval_loss"):
        self.evals, self.key = evals, key
        self._losses: list[float] = []  # rank-0 train losses logged since the last evaluation
        self._train: float | None = None  # the interval's mean train loss at the last evaluation
        self._last: tuple[int, float, float | None] | None = None  # (step, eval loss, train loss) of the last eval
        self._lowest: tuple[int, float] | None = None  # (step, eval loss) of the lowest evaluation so far
        self._start: tuple[int, float, float | None] | None = None  # the evaluation the rising streak began after
        self.rises = 0
        self._raised = False

    def on_event(self, event: Event) -> list[Finding]:
        log = _rank0_log(event)
        if log is not None and log.loss is not None:
            self._losses.append(log.loss)
            return []
        if not isinstance(event, Eval) or event.rank != 0 or event.step is None:
            return []
        value = event.metrics.get(self.key)
        if value is None:
            return []
        if self._losses:
            self._train = sum(self._losses) / len(self._losses)
            self._losses = []
        current = (event.step, value, self._train)
        previous, self._last = self._last, current
        if self._lowest is None or value < self._lowest[1]:
            self._lowest = (event.step, value)
        if previous is None or value <= previous[1]:
            self.rises, self._start, self._raised = 0, None, False
            return []
        if self.rises == 0:
            self._start = previous
        self.rises += 1
        start = self._start
        assert start is not None
        fell = start[2] is not None and self._train is not None and self._train < start[2]
        if self.rises < self.evals or not fell or self._raised:
            return []
        self._raised = True
        lowest = self._lowest
        assert lowest is not None
        return [Finding(self.kind, f"overfitting: the eval loss rose at {self.rises} evaluations in a row "
                                   f"({start[1]:.4g} at step {start[0]} to {value:.4g} at step {event.step}) while "
                                   f"the train loss fell ({start[2]:.4g} to {self._train:.4g}); the lowest eval loss "
                                   f"was {lowest[1]:.4g} at step {lowest[0]}", event.step,
                        {"eval_loss": value, "eval_loss_at_start": start[1], "start_step": start[0],
                         "train_loss": self._train, "train_loss_at_start": start[2], "rises_in_a_row": self.rises,
                         "limit": self.evals, "best_step": lowest[0], "best_eval_loss": lowest[1]})]


class ThresholdLatch:
    """Once-per-episode alerting for a reading compared with a limit (memory, disk)."""

    def __init__(self) -> None:
        self._raised: set[str] = set()

    def check(self, key: str, bad: bool) -> bool:
        """True when `bad` newly became true for `key`."""
        if not bad:
            self._raised.discard(key)
            return False
        if key in self._raised:
            return False
        self._raised.add(key)
        return True


class GpuMemoryDetector:
    kind = "gpu_memory"

    def __init__(self, fraction: float):
        self.fraction = fraction
        self._latch = ThresholdLatch()

    def on_sample(self, gpus: list[tuple[int, int | None, int | None]], step: int | None) -> list[Finding]:
        """`gpus`: (index, used bytes, total bytes) per card."""
        found = []
        for index, used, total in gpus:
            if not used or not total:
                continue
            if self._latch.check(str(index), used / total > self.fraction):
                found.append(Finding(self.kind, f"GPU {index} memory at {used / total:.0%} ({size(used)} of "
                                                f"{size(total)}); next: out of memory", step,
                                     {"gpu": index, "used_bytes": used, "total_bytes": total,
                                      "fraction": self.fraction}))
        return found


class HostMemoryDetector:
    kind = "host_memory"

    def __init__(self, min_fraction: float):
        self.min_fraction = min_fraction
        self._latch = ThresholdLatch()

    def on_sample(self, available: int, total: int, step: int | None) -> list[Finding]:
        if not total or not self._latch.check("host", available / total < self.min_fraction):
            return []
        return [Finding(self.kind, f"host RAM low: {size(available)} available of {size(total)} "
                                   f"({available / total:.0%}); the kernel's OOM killer is next", step,
                        {"available_bytes": available, "total_bytes": total, "min_fraction": self.min_fraction})]


class DiskDetector:
    kind = "disk"

    def __init__(self, margin: float):
        self.margin = margin
        self._latch = ThresholdLatch()

    def on_sample(self, free: int, next_checkpoint: int | None, folder: str, step: int | None,
                  basis: str = "") -> list[Finding]:
        if not next_checkpoint:
            return []
        if not self._latch.check("disk", free < self.margin * next_checkpoint):
            return []
        return [Finding(self.kind, f"disk low on {folder}: {size(free)} free, the next checkpoint needs about "
                                   f"{size(next_checkpoint)}", step,
                        {"free_bytes": free, "next_checkpoint_bytes": next_checkpoint, "margin": self.margin,
                         "folder": folder, "forecast_from": basis})]


def event_detectors(config: WatchSection) -> list[Any]:
    """The detectors fed from events.jsonl, in the order they run."""
    found: list[Any] = []
    if config.nonfinite:
        found.append(NonfiniteDetector())
    found += [DivergenceDetector(config.divergence_factor, config.divergence_window),
              LossScaleDetector(config.loss_scale_min, config.overflow_run),
              ThroughputDetector(config.throughput_fraction, config.throughput_window),
              OverfitDetector(config.overfit_evals)]
    return found
