"""A resume proves it carried on (#39): the first logged steps after a resume against the tail before the stop,
which the watchdog reads from the events file as it was when the resumed attempt began.

- the loss: the median of the first `logs` losses after, against the band (min-max) of the last losses before;
  above `loss_factor` x its top is drift ("loss 2.3x the band before the stop");
- the learning rate: at a step both attempts logged, the same; else against the last one before; below half
  and rising is "back at warm-up", below half or above double "the schedule changed";
- the step: a resumed attempt that begins at step 0 after the earlier one reached N started over;
- the data position: the epoch at the first step after, against the epoch the steps before predict.

A clean resume is said once (`clean`), for the watchdog to write in the run's log."""

from __future__ import annotations

import statistics
from typing import Any

from backend.contract.events import Event, Log, RunBegin
from backend.watch.finding import Finding, rank0_log


class ResumeDetector:
    kind = "resume_drift"

    def __init__(self, before: list[Log], logs: int = 5, loss_factor: float = 1.5):
        self.before = [e for e in before if e.step is not None][-50:]
        self.logs, self.loss_factor = logs, loss_factor
        self.start_step: int | None = None
        self.after: list[Log] = []
        self.armed = False
        self.clean: str | None = None  # said once, by the watchdog, when the resume carried on

    def on_event(self, event: Event) -> list[Finding]:
        if isinstance(event, RunBegin) and event.rank == 0:
            self.start_step = event.start_step or 0
            self.armed = bool(self.before)
            self.after = []
            return self._restarted() if self.armed and self.start_step == 0 else []
        log = rank0_log(event)
        if not self.armed or log is None or self.start_step is None or (log.step or 0) <= self.start_step:
            return []
        self.after.append(log)
        if len(self.after) < self.logs:
            return []
        self.armed = False
        return self._judge()

    def _restarted(self) -> list[Finding]:
        self.armed = False
        last = self.before[-1].step
        return [Finding(self.kind, f"the resumed run began again at step 0; before the stop it had reached step "
                                   f"{last}: its checkpoint was not loaded", 0,
                        {"start_step": 0, "step_before_stop": last})]

    def _judge(self) -> list[Finding]:
        said: list[str] = []
        evidence: dict[str, Any] = {"start_step": self.start_step, "steps_after": [e.step for e in self.after],
                              "steps_before": [e.step for e in self.before[-10:]]}
        for check in (self._loss, self._learning_rate, self._epoch):
            text, numbers = check()
            evidence.update(numbers)
            if text:
                said.append(text)
        step = self.after[-1].step
        if said:
            return [Finding(self.kind, f"after the resume from step {self.start_step}: " + "; ".join(said), step,
                            evidence)]
        self.clean = (f"resume check: the run carried on from step {self.start_step} "
                      f"(loss {_g(evidence.get('loss_after'))} within the band before the stop, learning rate "
                      f"{_g(evidence.get('lr_after'))} continuing {_g(evidence.get('lr_expected'))})")
        return []

    def _loss(self) -> tuple[str | None, dict[str, Any]]:
        before = [e.loss for e in self.before[-10:] if e.loss is not None]
        after = [e.loss for e in self.after if e.loss is not None]
        if not before or not after:
            return None, {}
        low, high, now = min(before), max(before), statistics.median(after)
        numbers = {"loss_band_before": [round(low, 4), round(high, 4)], "loss_after": round(now, 4)}
        if now > self.loss_factor * high:
            return (f"loss {now:.3g} is {now / high:.1f}x the band before the stop ({low:.3g}-{high:.3g})",
                    numbers)
        return None, numbers

    def _learning_rate(self) -> tuple[str | None, dict[str, Any]]:
        first = self.after[0]
        if first.learning_rate is None or first.step is None:
            return None, {}
        same = [e for e in self.before if e.step == first.step and e.learning_rate is not None]
        earlier = [e for e in self.before if e.step is not None and e.step <= first.step and e.learning_rate]
        ref = same[-1] if same else earlier[-1] if earlier else None
        if ref is None or not ref.learning_rate:
            return None, {}
        now, expected = first.learning_rate, ref.learning_rate
        numbers = {"lr_after": now, "lr_expected": expected, "lr_expected_at_step": ref.step}
        ratio = now / expected
        if 0.5 <= ratio <= 2.0:
            return None, numbers
        rates = [e.learning_rate for e in self.after if e.learning_rate is not None]
        rising = len(rates) > 1 and rates[-1] > rates[0]
        what = ("back at warm-up" if ratio < 0.5 and rising else "the schedule changed")
        return (f"learning rate {now:.3g} at step {first.step} against {expected:.3g} at step {ref.step} before the "
                f"stop ({ratio:.0%}): {what}", numbers)

    def _epoch(self) -> tuple[str | None, dict[str, Any]]:
        known = [e for e in self.before if e.epoch is not None and e.step is not None]
        first = self.after[0]
        if len(known) < 2 or first.epoch is None or first.step is None or known[-1].step == known[0].step:
            return None, {}
        a, b = known[0], known[-1]
        rate = (b.epoch - a.epoch) / (b.step - a.step)  # type: ignore[operator]
        expected = b.epoch + rate * (first.step - b.step)  # type: ignore[operator]
        numbers = {"epoch_after": first.epoch, "epoch_expected": round(expected, 4)}
        if abs(first.epoch - expected) > max(0.05, 5 * abs(rate)):
            return (f"data position: epoch {first.epoch:.3g} at step {first.step}, the steps before predict "
                    f"{expected:.3g}", numbers)
        return None, numbers


def _g(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else "n/a"
