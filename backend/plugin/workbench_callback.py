"""Runs INSIDE the swift training process (every rank): appends to the run's events.jsonl.

Every line is one of backend.contract.events' typed events (`EventWriter.write` checks each field against
the schema before it is written).

Loaded by `swift sft --external_plugins <this file> --callbacks workbench_events`; swift
builds the callback as `cls(args, trainer)`. Configuration comes from the environment the
workbench sets: WORKBENCH_RUN_DIR, and for fp16 WORKBENCH_LOSS_SCALE_INIT /
WORKBENCH_LOSS_SCALE_GROWTH_INTERVAL / WORKBENCH_INJECT_OVERFLOW_STEPS; a test hook raises CUDA
out-of-memory at step N when WORKBENCH_INJECT_OOM_STEP=N (the queue's OOM retry, #25).

Save on demand and on signal (#27): save_asks.py; at a step's end a request sets `control.should_save` (the
checkpoint's event says `requested`), a signal or a "stop" request also stops the run, whose run_end says
"stopped" and why ("saved and stopped on SIGUSR1"). The fp16 loss scale: loss_scale.py. Debug and test
hooks (overflow, NaN, OOM injection): fault_hooks.py. Those siblings are imported as `backend.plugin.*`
(the supervisor starts the trainer with the repository importable, as it already is for backend.contract.events).

Cost per step: nothing is read from the GPU between logging steps (but that all-reduce with several ranks). The loss scale is
compared with its previous value as device tensors (no synchronisation), which counts
every overflow exactly even when several happen between two logs.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from swift.callbacks import callbacks_map
from transformers import TrainerCallback

from backend.contract.event_writer import EventWriter
from backend.contract.events import EVENTS_FILE_NAME, CudaMemory, GpuUsed
from backend.contract.heartbeat import RankProgressWriter, heartbeat_path, register_stack_dump
from backend.core.collector import skip_last_collections
from backend.hardware.machine import NvidiaGpus, tree_rss_bytes
from backend.plugin.fault_hooks import FaultHooks, slow_model_load
from backend.plugin.flight_dump import start_dump_listener
from backend.plugin.loss_scale import LossScale
from backend.plugin.save_asks import SaveAsks, rank
from backend.plugin.step_timing import StepTiming
from backend.plugin.step_timing import enabled as step_timing_enabled

LOG_KEYS = {"loss": "loss", "learning_rate": "learning_rate", "grad_norm": "grad_norm", "token_acc": "token_acc"}


def _finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _is_nonfinite(value: Any) -> bool:
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class WorkbenchEventsCallback(TrainerCallback):
    def __init__(self, args: Any = None, trainer: Any = None):
        self.trainer = trainer
        skip_last_collections()  # the trainer's end takes ~1.5 s less (backend/core/collector.py)
        run_dir = Path(os.environ.get("WORKBENCH_RUN_DIR", getattr(args, "output_dir", ".") or "."))
        self.writer = EventWriter(run_dir / EVENTS_FILE_NAME, rank=rank())
        profile = _run_profile(run_dir)
        # the watchdog (#15): a stack dump on a real-time signal for hang alerts; NaN injection to try it
        self._stack_file = _register_stack_dump(run_dir)
        self.faults = FaultHooks(profile)
        self._heartbeat_path = heartbeat_path(run_dir)
        self.progress = RankProgressWriter(run_dir, rank())  # which rank stopped moving, and where (#39)
        self._flight_dumps = start_dump_listener(run_dir, rank())  # the flight recorder's dump when asked (#39)
        self._last_heartbeat = 0.0
        self.loss_scale = LossScale(trainer)
        self._tokens = 0
        self._last_log = (time.monotonic(), 0, 0)  # time, step, tokens
        self._start = time.monotonic()
        self._peak_rss = 0
        self._phase: str | None = "load"  # the memory phase now running (#26): the planner's timeline
        self._cuda_peak: CudaMemory | None = None  # over the whole run (the allocator's peaks reset per phase)
        # NVML per GPU at each phase boundary: rank 0 only (one reading of every GPU), and never on CPU
        self._gpus = NvidiaGpus() if rank() == 0 and torch.cuda.is_available() else None
        self.save_asks = SaveAsks(run_dir, profile)

    # ------------------------------------------------------------ begin

    def on_train_begin(self, args, state, control, **kwargs):
        accelerator = self.trainer.accelerator
        if args.fp16 and accelerator.scaler is None and accelerator.device.type == "cpu":
            self.loss_scale.install_cpu_scaler(accelerator)
        self._count_tokens()
        self.faults.install(self.trainer)
        if step_timing_enabled():  # where each step's time goes (#38); after the faults: a slow loader is timed
            self.trainer.add_callback(StepTiming(self.trainer, self.writer))
        model = self.trainer.model
        params = list(model.parameters())
        scaler, reason = self.loss_scale.description()
        self._last_log = (time.monotonic(), state.global_step, 0)
        self.writer.write(
            "run_begin",
            precision="fp16" if args.fp16 else "bf16" if args.bf16 else "fp32",
            mixed_precision=str(accelerator.mixed_precision),
            scaler=scaler,
            scaler_reason=reason,
            distributed_type=str(accelerator.distributed_type).split(".")[-1],
            world_size=accelerator.num_processes,
            devices=[str(accelerator.device)],
            trainable_params=sum(p.numel() for p in params if p.requires_grad),
            total_params=sum(p.numel() for p in params),
            param_dtype=str(params[0].dtype).removeprefix("torch.") if params else None,
            max_steps=state.max_steps,
            start_step=state.global_step,
            rss_bytes=psutil.Process().memory_info().rss,
            output_dir=args.output_dir,
            train_rows=_train_rows(self.trainer),
        )
        self._end_phase(state, "first_step")

    def _count_tokens(self) -> None:
        """Count tokens per step from tensor shapes (metadata only, no device sync)."""
        original = self.trainer.training_step

        def counting_step(model, inputs, *args, **kwargs):
            ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
            if ids is not None:
                self._tokens += ids.numel()
            return original(model, inputs, *args, **kwargs)

        self.trainer.training_step = counting_step

    # ------------------------------------------------------------ per step

    def on_step_begin(self, args, state, control, **kwargs):
        self.progress.at(state.global_step + 1, "step")
        self.faults.on_step_begin(state.global_step)  # an injected OOM (the queue's retry test, #25) raises here

    def _heartbeat(self) -> None:
        """Touch <run>/watch/heartbeat (at most once a second): steps and evaluation batches are
        progress for the watchdog's hang detector, also while no log record is due."""
        now = time.monotonic()
        if now - self._last_heartbeat < 1.0:
            return
        self._last_heartbeat = now
        try:
            os.utime(self._heartbeat_path)
        except OSError:
            try:
                self._heartbeat_path.touch()
            except OSError:  # a read-only run folder: hang detection falls back to the log records
                pass

    def on_prediction_step(self, args, state, control, **kwargs):
        self._heartbeat()
        self.progress.at(state.global_step, "eval", throttle=True)

    # ------------------------------------------------------------ memory per phase (#26)

    def _end_phase(self, state: Any, next_phase: str | None) -> None:
        """Write what the phase now ending measured and start the next; CUDA peaks restart per phase."""
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            device = torch.cuda.current_device()
            memory = _cuda_memory(device)
            cuda = [memory]
            self._cuda_peak = _larger_peaks(self._cuda_peak, memory)
            torch.cuda.reset_peak_memory_stats(device)
        me = psutil.Process()
        rss = me.memory_info().rss
        self._peak_rss = max(self._peak_rss, rss)
        if self._phase is not None:
            self.writer.write("memory_phase", phase=self._phase, step=state.global_step, rss_bytes=rss, cuda=cuda,
                              tree_rss_bytes=tree_rss_bytes(me), nvml=self._nvml())
        self._phase = next_phase

    def _nvml(self) -> list[GpuUsed] | None:
        """Every GPU's used memory now, as NVML says (None on CPU, on ranks other than 0, without NVML)."""
        if self._gpus is None:
            return None
        gpus = self._gpus.read(processes=False)
        return [GpuUsed(index=g.index, used=g.memory_used_bytes, total=g.memory_total_bytes) for g in gpus] or None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._phase == "first_step":  # forward/backward of step 1 done; the optimizer creates its state now
            self._end_phase(state, "optimizer_step")

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._phase == "optimizer_step":
            self._end_phase(state, "steady_step")

    def on_step_end(self, args, state, control, **kwargs):
        self._heartbeat()
        self.progress.at(state.global_step, "after_step")
        self.save_asks.take(self.trainer.accelerator, control)
        # the flow callback (called first) has decided: evaluation, then saving, follow this step
        if control.should_evaluate:
            self._end_phase(state, "eval")
        elif control.should_save:
            self._end_phase(state, "save")
        self.loss_scale.count_overflow()

    # ------------------------------------------------------------ logging

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if any(key.startswith("eval_") for key in logs) or "train_runtime" in logs:
            return
        now = time.monotonic()
        last_time, last_step, last_tokens = self._last_log
        elapsed = max(now - last_time, 1e-9)
        self._last_log = (now, state.global_step, self._tokens)
        rss = psutil.Process().memory_info().rss
        self._peak_rss = max(self._peak_rss, rss)
        event: dict[str, Any] = {
            "step": state.global_step,
            "max_steps": state.max_steps,
            "epoch": _finite_or_none(logs.get("epoch", state.epoch)),
            **{name: _finite_or_none(logs.get(key)) for name, key in LOG_KEYS.items()},
            # a NaN/inf is written as null above; this says which nulls were non-finite, not missing
            "nonfinite": [name for name, key in LOG_KEYS.items() if _is_nonfinite(logs.get(key))],
            "steps_per_second": (state.global_step - last_step) / elapsed,
            "tokens_per_second": (self._tokens - last_tokens) / elapsed,
            "rss_bytes": rss,
            **self.loss_scale.fields(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            event["cuda"] = [_cuda_memory(torch.cuda.current_device())]
        self.writer.write("log", **event)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        clean = {k: _finite_or_none(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
        self.writer.write("eval", step=state.global_step, metrics=clean)
        if self._phase == "eval":
            self._end_phase(state, "save" if control.should_save else "steady_step")

    def on_save(self, args, state, control, **kwargs):
        self.progress.at(state.global_step, "save")
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.writer.write("checkpoint", step=state.global_step, path=path, requested=self.save_asks.requested)
        self.save_asks.requested = None
        if self._phase == "save":
            self._end_phase(state, "steady_step")

    def on_train_end(self, args, state, control, **kwargs):
        self._end_phase(state, None)
        peaks = [self._cuda_peak] if self._cuda_peak is not None else []
        self._peak_rss = max(self._peak_rss, psutil.Process().memory_info().rss)
        self.writer.write(
            "run_end",
            step=state.global_step,
            max_steps=state.max_steps,
            status="stopped" if self.save_asks.stop_reason else "finished",
            reason=self.save_asks.stop_reason,
            runtime_seconds=time.monotonic() - self._start,
            peak_rss_bytes=self._peak_rss,
            cuda_peaks=peaks,
            **self.loss_scale.fields(),
        )


def _register_stack_dump(run_dir: Path) -> Any:
    try:
        return register_stack_dump(run_dir)
    except OSError:  # a read-only run folder: no dumps, training goes on
        return None


def _run_profile(run_dir: Path) -> dict[str, Any]:
    """The run's profile snapshot as plain data (the trainer's only way to read it); {} when unreadable."""
    import tomllib

    try:
        return tomllib.loads((run_dir / "profile.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _larger_peaks(kept: CudaMemory | None, now: CudaMemory) -> CudaMemory:
    """The run's peaks so far: the larger of those kept and this phase's (current counters: now's)."""
    if kept is None:
        return now
    return CudaMemory(device=now.device, allocated=now.allocated, reserved=now.reserved,
                      max_allocated=max(kept.max_allocated, now.max_allocated),
                      max_reserved=max(kept.max_reserved, now.max_reserved))


def _cuda_memory(device: int) -> CudaMemory:
    """Allocator counters: host-side bookkeeping, no device synchronisation."""
    return CudaMemory(
        device=device,
        allocated=torch.cuda.memory_allocated(device),
        reserved=torch.cuda.memory_reserved(device),
        max_allocated=torch.cuda.max_memory_allocated(device),
        max_reserved=torch.cuda.max_memory_reserved(device),
    )


def _announce_model_loading() -> None:
    """swift imports this file as it reads its arguments, just before it loads the model: the first phase of
    the run's start the trainer itself sees (#35; the monitor and `workbench status` say it)."""
    run_dir = os.environ.get("WORKBENCH_RUN_DIR")
    if not run_dir:  # not a workbench launch (swift's arguments built by validate, a user's own command)
        return
    try:
        writer = EventWriter(Path(run_dir) / EVENTS_FILE_NAME, rank=rank())
        writer.write("phase", phase="model")
        writer.close()
    except OSError:  # a read-only run folder: the phase comes from the log
        pass
    slow_model_load()


callbacks_map["workbench_events"] = WorkbenchEventsCallback
_announce_model_loading()


def _train_rows(trainer: Any) -> int | None:
    """How many rows the training set has (the doctor asks whether a micro-batch holds all of them)."""
    try:
        return len(trainer.train_dataset)
    except TypeError:  # an iterable (streamed) dataset has no length
        return None
