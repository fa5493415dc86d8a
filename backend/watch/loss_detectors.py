"""Detectors of the training signal, fed events: a non-finite loss or grad norm, a diverging loss, the fp16
loss scale collapsing, and overfitting (eval loss rising while the train loss falls)."""

from __future__ import annotations

from collections import deque

from backend.contract.events import Eval, Event, Log, RunBegin
from backend.watch.finding import Finding, rank0_log


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
        log = rank0_log(event)
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
        log = rank0_log(event)
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
        log = rank0_log(event)
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
