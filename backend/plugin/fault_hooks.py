"""Debug and test hooks inside swift's training process (loaded by workbench_callback.py): an inf gradient at
chosen optimizer steps (WORKBENCH_INJECT_OVERFLOW_STEPS, before the scaler unscales: a real overflow), a NaN
loss at chosen steps ([debug] inject_nan_steps of the run's profile, for the watchdog), and CUDA out of memory
at step N (WORKBENCH_INJECT_OOM_STEP=N, the queue's OOM retry, #25), and one rank that hangs inside a step
(WORKBENCH_INJECT_HANG=RANK:STEP:SECONDS: it sleeps in its loss computation while the others wait for it, #39),
and a slow model load (WORKBENCH_INJECT_LOAD_DELAY=SECONDS, #35), and memory that leaks at every step
(WORKBENCH_INJECT_LEAK_MIB=N: N MiB more held on the training device, the watchdog's creep alert, #37)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

INJECT_OOM_ENV = "WORKBENCH_INJECT_OOM_STEP"
INJECT_HANG_ENV = "WORKBENCH_INJECT_HANG"
INJECT_DATA_DELAY_ENV = "WORKBENCH_INJECT_DATA_DELAY"  # seconds more for every batch fetched (#38)
INJECT_SLOW_RANK_ENV = "WORKBENCH_INJECT_SLOW_RANK"  # RANK:SECONDS more in every forward of that rank (#38)
INJECT_LOAD_DELAY_ENV = "WORKBENCH_INJECT_LOAD_DELAY"  # seconds held just before swift loads the model (#35)
INJECT_LEAK_ENV = "WORKBENCH_INJECT_LEAK_MIB"  # MiB more held at every optimizer step (#37)


def inject_oom_step() -> int | None:
    """The step at which a test asks for a CUDA out-of-memory error (WORKBENCH_INJECT_OOM_STEP=N), or None."""
    value = os.environ.get(INJECT_OOM_ENV, "")
    return int(value) if value.isdigit() else None


def inject_hang(rank: int) -> tuple[int, float] | None:
    """(step, seconds) when WORKBENCH_INJECT_HANG=RANK:STEP:SECONDS names this rank, else None."""
    parts = os.environ.get(INJECT_HANG_ENV, "").split(":")
    if len(parts) != 3 or not all(p.replace(".", "", 1).isdigit() for p in parts) or int(parts[0]) != rank:
        return None
    return int(parts[1]), float(parts[2])


def injected_hang(seconds: float) -> None:
    """The injected hang: a plain sleep, so the stack shows this function (and its caller, the loss)."""
    time.sleep(seconds)


def slow_model_load() -> None:
    """Hold the run's start for WORKBENCH_INJECT_LOAD_DELAY seconds just before swift loads the model: a slow
    load, for the monitor's first minute (#35)."""
    value = os.environ.get(INJECT_LOAD_DELAY_ENV, "")
    if value.replace(".", "", 1).isdigit():
        time.sleep(float(value))


class FaultHooks:
    def __init__(self, profile: dict[str, Any]) -> None:
        self.inject_steps = {int(s) for s in os.environ.get("WORKBENCH_INJECT_OVERFLOW_STEPS", "").split(",") if s}
        self.nan_steps = {int(s) for s in profile.get("debug", {}).get("inject_nan_steps", [])}
        self._inject_now = False
        self._nan_now = False
        self.hang = inject_hang(int(os.environ.get("RANK", "0")))
        self._hang_now = False
        self.leak = Leak.from_env()

    def install(self, trainer: Any) -> None:
        """Hook the overflow and NaN injections into the trainer (nothing when none is asked)."""
        slow_data_loader(trainer)
        slow_rank(trainer)
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
        if self.hang:
            inner = trainer.compute_loss

            def hanging_loss(model, inputs, *args, **kwargs):
                if self._hang_now and self.hang:
                    self._hang_now = False
                    injected_hang(self.hang[1])
                return inner(model, inputs, *args, **kwargs)

            trainer.compute_loss = hanging_loss

    def on_step_begin(self, global_step: int) -> None:
        """Arm the hooks for the step about to run; raise the injected out-of-memory error at its step."""
        if inject_oom_step() == global_step + 1:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected at step {global_step + 1} by "
                                              f"{INJECT_OOM_ENV})")
        self._inject_now = (global_step + 1) in self.inject_steps
        self._nan_now = (global_step + 1) in self.nan_steps
        self._hang_now = self.hang is not None and self.hang[0] == global_step + 1
        if self.leak is not None:
            self.leak.step()


class Leak:
    """Memory that is never given back: one more block at every step, written to (so a CPU run's RSS holds it),
    on the device the model trains on."""

    def __init__(self, mib: float) -> None:
        self.elements = int(mib * 2**20) // 4  # float32
        self.held: list[torch.Tensor] = []
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

    @classmethod
    def from_env(cls) -> Leak | None:
        try:
            mib = float(os.environ.get(INJECT_LEAK_ENV, "") or 0)
        except ValueError:
            return None
        return cls(mib) if mib > 0 else None

    def step(self) -> None:
        self.held.append(torch.ones(self.elements, device=self.device))


def slow_data_loader(trainer: Any) -> None:
    """A data loader that is slow on purpose (WORKBENCH_INJECT_DATA_DELAY=SECONDS per batch, in its collate
    function: in the worker processes when there are some), for the throughput doctor's data-wait verdict (#38).
    The training loader is the one the trainer hands its callbacks; its iterator (and workers) start later."""
    try:
        delay = float(os.environ.get(INJECT_DATA_DELAY_ENV, "") or 0)
    except ValueError:
        return
    loader = getattr(getattr(trainer, "callback_handler", None), "train_dataloader", None)
    if delay <= 0 or loader is None:
        return
    collate = loader.collate_fn

    def slow_collate(rows: Any) -> Any:
        time.sleep(delay)
        return collate(rows)

    loader.collate_fn = slow_collate


def slow_rank(trainer: Any) -> None:
    """One rank slower than the others at every step (WORKBENCH_INJECT_SLOW_RANK=RANK:SECONDS, a sleep in its loss's
    forward), for the throughput doctor's slow-rank verdict (#38)."""
    parts = os.environ.get(INJECT_SLOW_RANK_ENV, "").split(":")
    if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) != int(os.environ.get("RANK", "0")):
        return
    try:
        delay = float(parts[1])
    except ValueError:
        return
    loss = trainer.compute_loss

    def slow_loss(*args: Any, **kwargs: Any) -> Any:
        if trainer.model.training:
            time.sleep(delay)
        return loss(*args, **kwargs)

    trainer.compute_loss = slow_loss
