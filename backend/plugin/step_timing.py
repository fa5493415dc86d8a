"""Where a step's time goes, measured inside the trainer on every rank (the throughput doctor, #38).

Added to the trainer's callbacks by workbench_callback.py at the start of training (after the fault hooks, so
that an injected slow data loader is inside what is timed). It wraps two of the trainer's methods and listens to
the step's callbacks:

    get_batch_samples (data wait) -> on_step_begin -> training_step x accumulation (forward + backward; its
    compute_loss: the forward, the part before any gradient exchange, which tells a slow rank from those waiting)
    -> clipping -> on_pre_optimizer_step -> optimizer.step (optimizer) -> on_optimizer_step -> scheduler
    -> on_step_end | logging (on_log) | evaluation (on_evaluate) | saving (on_save) | anything else, until the
    next fetch

and writes one `step_time` event per log (and at the trainer's last log, before `run_end`) with the sums
since the last one. On a GPU the forward
+ backward and the optimizer step are timed with CUDA events (host time would be the kernel launches, and the
GPU's work would land wherever the next synchronisation is); the events and the token counts stay on the device
until the log, where the trainer synchronises for the loss anyway. Tokens: the attention mask's ones (real) and
the rest of the batch (padding); without a mask (packing, padding-free) every token is real and each sequence's
length comes from its position ids.

Cost: a few clock reads and small tensor sums per micro-batch (bench/doctor_overhead.py measures it).
WORKBENCH_STEP_TIMING=off leaves it out (the bench's other half).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch
from transformers import TrainerCallback

from backend.contract.event_writer import EventWriter

STEP_TIMING_ENV = "WORKBENCH_STEP_TIMING"
MAX_STEPS_LISTED = 4096  # per event: a log interval longer than that lists its first steps only


def enabled() -> bool:
    return os.environ.get(STEP_TIMING_ENV, "on").lower() not in ("off", "0", "false", "no")


@dataclass
class _Interval:
    """The sums since the last event."""

    first_step: int | None = None
    last_step: int | None = None
    step_seconds: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("data_wait", "forward_backward", "forward", "forward_wait", "optimizer", "logging", "eval", "save",
         "between_other"),
        0.0))
    gpu_pairs: list[tuple[str, Any, Any]] = field(default_factory=list)  # (what, start event, end event)
    micro_batches: int = 0
    rows: Any = 0  # a device tensor once a packed batch was counted
    tokens: int = 0
    real: Any = 0  # a device tensor once a batch was counted (read at the log)
    real_sq: Any = 0
    step_tokens: list[int] = field(default_factory=list)  # each step's largest micro-batch, padded (#37)
    step_memory: list[int] = field(default_factory=list)  # each step's memory after its largest forward (#37)


class StepTiming(TrainerCallback):
    def __init__(self, trainer: Any, writer: EventWriter) -> None:
        self.writer = writer
        device = trainer.accelerator.device
        self.cuda = device.type == "cuda" and torch.cuda.is_available()
        self.device = str(device)
        self.device_name = torch.cuda.get_device_name(device) if self.cuda else None
        self.now = _Interval()
        self._mark: float | None = None  # when the time between steps began to be counted
        self._step_start = 0.0
        self._optimizer_start: Any = None
        self._training = False
        self._batch_tokens = 0  # this step's largest micro-batch so far (rows x padded length)
        self._batch_memory = 0  # this step's memory after a forward, at its largest
        self._process = psutil.Process()
        self.memory_kind, self.memory_limit = self._memory_device(device)
        self._wrap(trainer)

    def _memory_device(self, device: Any) -> tuple[str, int | None]:
        """What a step's memory is read from, and its limit: the GPU's allocator (what an OOM is counted
        against) on CUDA, else the process's host RSS against the machine's RAM: its peak within the step where
        the kernel keeps one that can be reset (a step's backward frees what its forward held: the RSS after
        the forward misses the peak, and the allocator keeps freed pages, so later steps would look as high)."""
        if self.cuda:
            return "cuda_allocated", torch.cuda.get_device_properties(device).total_memory
        return ("host_peak_rss" if _reset_peak_rss() else "host_rss"), psutil.virtual_memory().total

    def _memory_now(self) -> int:
        """Host-side counters only: no synchronisation with the device."""
        if self.cuda:
            return torch.cuda.memory_allocated()
        return self._process.memory_info().rss

    # ------------------------------------------------------------ inside a step

    def _wrap(self, trainer: Any) -> None:
        fetch, train, loss = trainer.get_batch_samples, trainer.training_step, trainer.compute_loss

        def timed_fetch(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            if self._mark is not None:
                self.now.seconds["between_other"] += start - self._mark
                self._mark = None
            self._step_start = start
            if self.memory_kind == "host_peak_rss":
                _reset_peak_rss()
            result = fetch(*args, **kwargs)
            self.now.seconds["data_wait"] += time.perf_counter() - start
            return result

        def timed_training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._count(inputs)
            start = self._clock()
            self._training = True
            try:
                result = train(model, inputs, *args, **kwargs)
            finally:
                self._training = False
            self._add("forward_backward", start, self._clock())
            return result

        def timed_loss(*args: Any, **kwargs: Any) -> Any:
            if not self._training:  # evaluation's losses are not a step's forward
                return loss(*args, **kwargs)
            start = self._clock()
            result = loss(*args, **kwargs)
            self._add("forward", start, self._clock())
            self._batch_memory = max(self._batch_memory, self._memory_now())  # the activations are all held now
            return result

        ddp: Any = getattr(trainer, "model_wrapped", None)
        sync = getattr(ddp, "_sync_buffers", None)  # DDP's buffer broadcast at the forward's start: ranks meet there
        if callable(sync):

            def timed_sync(*args: Any, **kwargs: Any) -> Any:
                start = self._clock()
                result = sync(*args, **kwargs)
                if self._training:
                    self._add("forward_wait", start, self._clock())
                return result

            ddp._sync_buffers = timed_sync
        trainer.get_batch_samples = timed_fetch
        trainer.training_step = timed_training_step
        trainer.compute_loss = timed_loss

    def _clock(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _add(self, what: str, start: Any, end: Any) -> None:
        if self.cuda:
            self.now.gpu_pairs.append((what, start, end))
        else:
            self.now.seconds[what] += end - start

    def _count(self, inputs: Any) -> None:
        """Real and padded tokens of one micro-batch, summed on its device (no synchronisation)."""
        ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
        if ids is None or ids.dim() != 2:
            return
        now = self.now
        now.micro_batches += 1
        now.tokens += ids.numel()
        self._batch_tokens = max(self._batch_tokens, ids.numel())
        mask = inputs.get("attention_mask")
        if mask is not None and mask.shape == ids.shape:
            lengths = mask.sum(-1)
            now.rows += ids.shape[0]
            now.real = now.real + lengths.sum()
            now.real_sq = now.real_sq + (lengths * lengths).sum()
            return
        positions = inputs.get("position_ids")
        now.real = now.real + ids.numel()
        if positions is not None and positions.shape == ids.shape:  # packed: each sequence restarts at 0
            now.rows = now.rows + (positions == 0).sum()
            now.real_sq = now.real_sq + (2 * positions + 1).sum()  # a sequence of L: 1 + 3 + ... = L^2
        else:
            now.rows += ids.shape[0]
            now.real_sq = now.real_sq + ids.shape[0] * ids.shape[1] ** 2

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._optimizer_start = self._clock()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._optimizer_start is not None:
            self._add("optimizer", self._optimizer_start, self._clock())
            self._optimizer_start = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        end = time.perf_counter()
        now = self.now
        if now.first_step is None:
            now.first_step = state.global_step
        now.last_step = state.global_step
        if len(now.step_seconds) < MAX_STEPS_LISTED:
            now.step_seconds.append(end - self._step_start)
            now.step_tokens.append(self._batch_tokens)
            peak = _peak_rss() if self.memory_kind == "host_peak_rss" else None
            now.step_memory.append(max(self._batch_memory, peak or 0))
        self._batch_tokens = self._batch_memory = 0
        self._mark = end

    # ------------------------------------------------------------ between steps

    def _between(self, what: str) -> None:
        if self._mark is not None:
            end = time.perf_counter()
            self.now.seconds[what] += end - self._mark
            self._mark = end

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if "train_runtime" in (logs or {}):  # the trainer's last log, before on_train_end: the rest goes out now,
            self._between("between_other")  # so that run_end stays the events' last line
            self._mark = None
            self._write()
            return
        if any(str(key).startswith("eval_") for key in logs or {}):
            return
        self._between("logging")
        self._write()
        self._mark = time.perf_counter()  # writing the event is logging's too, and counted in the next one

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._between("eval")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._between("save")

    # ------------------------------------------------------------ the event

    def _write(self) -> None:
        now, self.now = self.now, _Interval()
        if now.first_step is None and not any(now.seconds.values()):
            return
        seconds = dict(now.seconds)
        if now.gpu_pairs:
            now.gpu_pairs[-1][2].synchronize()
            for what, start, end in now.gpu_pairs:
                seconds[what] += start.elapsed_time(end) / 1000.0
        inside = seconds["data_wait"] + seconds["forward_backward"] + seconds["optimizer"]
        real = int(now.real)
        self.writer.write(
            "step_time", first_step=now.first_step, last_step=now.last_step, step_seconds=now.step_seconds,
            other_in_step=max(0.0, sum(now.step_seconds) - inside), micro_batches=now.micro_batches, rows=int(now.rows),
            real_tokens=real, padded_tokens=max(0, now.tokens - real), real_tokens_sq=int(now.real_sq),
            step_tokens=now.step_tokens, step_memory=now.step_memory, memory_kind=self.memory_kind,
            memory_limit=self.memory_limit,
            clock="cuda_events" if self.cuda else "host", device=self.device, device_name=self.device_name,
            **seconds)


def _reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark of this process's RSS (Linux: 5 into /proc/self/clear_refs); False where
    it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int | None:
    """This process's RSS high-water mark since the last reset (VmHWM of /proc/self/status, in kB), or None."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
