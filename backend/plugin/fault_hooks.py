"""Debug and test hooks inside swift's training process (loaded by workbench_callback.py): an inf gradient at
chosen optimizer steps (WORKBENCH_INJECT_OVERFLOW_STEPS, before the scaler unscales: a real overflow), a NaN
loss at chosen steps ([debug] inject_nan_steps of the run's profile, for the watchdog), and CUDA out of memory
at step N (WORKBENCH_INJECT_OOM_STEP=N, the queue's OOM retry, #25)."""

from __future__ import annotations

import os
from typing import Any

import torch

INJECT_OOM_ENV = "WORKBENCH_INJECT_OOM_STEP"


def inject_oom_step() -> int | None:
    """The step at which a test asks for a CUDA out-of-memory error (WORKBENCH_INJECT_OOM_STEP=N), or None."""
    value = os.environ.get(INJECT_OOM_ENV, "")
    return int(value) if value.isdigit() else None


class FaultHooks:
    def __init__(self, profile: dict[str, Any]) -> None:
        self.inject_steps = {int(s) for s in os.environ.get("WORKBENCH_INJECT_OVERFLOW_STEPS", "").split(",") if s}
        self.nan_steps = {int(s) for s in profile.get("debug", {}).get("inject_nan_steps", [])}
        self._inject_now = False
        self._nan_now = False

    def install(self, trainer: Any) -> None:
        """Hook the overflow and NaN injections into the trainer (nothing when none is asked)."""
        if self.inject_steps:
            trainable = next((p for p in trainer.model.parameters() if p.requires_grad), None)
            if trainable is not None:
                trainable.register_hook(lambda grad: grad * float("inf") if self._inject_now else grad)
        if self.nan_steps:
            original = trainer.compute_loss

            def nan_loss(model, inputs, *args, **kwargs):
                result = original(model, inputs, *args, **kwargs)
                if not self._nan_now:
                    return result
                if isinstance(result, tuple):
                    return (result[0] * float("nan"), *result[1:])
                return result * float("nan")

            trainer.compute_loss = nan_loss

    def on_step_begin(self, global_step: int) -> None:
        """Arm the hooks for the step about to run; raise the injected out-of-memory error at its step."""
        if inject_oom_step() == global_step + 1:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected at step {global_step + 1} by "
                                              f"{INJECT_OOM_ENV})")
        self._inject_now = (global_step + 1) in self.inject_steps
        self._nan_now = (global_step + 1) in self.nan_steps
