"""Runs INSIDE the swift training process (every rank): appends to the run's events.jsonl.

Every line is one of backend.events' typed events (`EventWriter.write` checks each field against
the schema before it is written).

Loaded by `swift sft --external_plugins <this file> --callbacks workbench_events`; swift
builds the callback as `cls(args, trainer)`. Configuration comes from the environment the
workbench sets: WORKBENCH_RUN_DIR, and for fp16 WORKBENCH_LOSS_SCALE_INIT /
WORKBENCH_LOSS_SCALE_GROWTH_INTERVAL / WORKBENCH_INJECT_OVERFLOW_STEPS; a test hook raises CUDA
out-of-memory at step N when WORKBENCH_INJECT_OOM_STEP=N (the queue's OOM retry, #25).

Save on demand and on signal (#27, backend/runs/save.py): at the end of every step the callback looks
for `<run>/save.request` (one stat) and for a signal caught since the last step: SIGUSR1 always,
SIGTERM when the profile says `[run] save_on_term = true`. A request sets `control.should_save` (the
checkpoint is written at the end of this step, its event says `requested`); a signal or a "stop"
request also sets `control.should_training_stop`, and the run ends with run_end status "stopped" and
the reason ("saved and stopped on SIGUSR1"). With several ranks one all-reduce per step makes every
rank save at the same step (a signal may reach one rank only).

Cost per step: nothing is read from the GPU between logging steps (but that all-reduce with several ranks). The loss scale is
compared with its previous value as device tensors (no synchronisation), which counts
every overflow exactly even when several happen between two logs.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from swift.callbacks import callbacks_map
from transformers import TrainerCallback

from backend.events import EVENTS_FILE_NAME, CudaMemory, EventWriter, GpuUsed
from backend.hardware import NvidiaGpus, tree_rss_bytes
from backend.runs.save import take_save_request
from backend.watch.stacks import heartbeat_path, register_stack_dump

# the save asks as the ranks agree on them (the largest wins): a save, a stop asked through the request file,
# SIGTERM (with [run] save_on_term) and SIGUSR1 caught by one rank
SIGNAL_CODES = {"SIGTERM": 3, "SIGUSR1": 4}
CODE_REASONS = {1: "save now", 2: "stop asked (save.request)", 3: "SIGTERM", 4: "SIGUSR1"}
LOG_KEYS = {"loss": "loss", "learning_rate": "learning_rate", "grad_norm": "grad_norm", "token_acc": "token_acc"}


INJECT_OOM_ENV = "WORKBENCH_INJECT_OOM_STEP"


def _inject_oom_step() -> int | None:
    """The step at which a test asks for a CUDA out-of-memory error (WORKBENCH_INJECT_OOM_STEP=N), or None."""
    value = os.environ.get(INJECT_OOM_ENV, "")
    return int(value) if value.isdigit() else None


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


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
        run_dir = Path(os.environ.get("WORKBENCH_RUN_DIR", getattr(args, "output_dir", ".") or "."))
        self.writer = EventWriter(run_dir / EVENTS_FILE_NAME, rank=_rank())
        self.inject_steps = {int(s) for s in os.environ.get("WORKBENCH_INJECT_OVERFLOW_STEPS", "").split(",") if s}
        # the watchdog (#15): a stack dump on a real-time signal for hang alerts; NaN injection to try it
        self._stack_file = _register_stack_dump(run_dir)
        self.nan_steps = _debug_nan_steps(run_dir)
        self._nan_now = False
        self._heartbeat_path = heartbeat_path(run_dir)
        self._last_heartbeat = 0.0
        self._inject_now = False
        self._prev_scale: torch.Tensor | None = None
        self._drops: torch.Tensor | None = None
        self._tokens = 0
        self._last_log = (time.monotonic(), 0, 0)  # time, step, tokens
        self._start = time.monotonic()
        self._peak_rss = 0
        self._phase: str | None = "load"  # the memory phase now running (#26): the planner's timeline
        self._cuda_peak: CudaMemory | None = None  # over the whole run (the allocator's peaks reset per phase)
        # NVML per GPU at each phase boundary: rank 0 only (one reading of every GPU), and never on CPU
        self._gpus = NvidiaGpus() if _rank() == 0 and torch.cuda.is_available() else None
        self._run_dir = run_dir
        self._signalled: str | None = None  # the signal caught since the last step end ("SIGUSR1", "SIGTERM")
        self._requested: str | None = None  # why the checkpoint now being saved was asked for
        self._stop_reason: str | None = None
        self._install_save_signals(_run_profile(run_dir))

    # ------------------------------------------------------------ begin

    def on_train_begin(self, args, state, control, **kwargs):
        accelerator = self.trainer.accelerator
        if args.fp16 and accelerator.scaler is None and accelerator.device.type == "cpu":
            self._install_cpu_scaler(accelerator)
        self._count_tokens()
        self._hook_overflow_injection()
        self._hook_nan_injection()
        model = self.trainer.model
        params = list(model.parameters())
        scaler, reason = self._scaler_description()
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
        )
        self._end_phase(state, "first_step")

    def _install_cpu_scaler(self, accelerator: Any) -> None:
        """Give a CPU fp16 run a real torch GradScaler and fp16 autocast.

        accelerate refuses to build a scaler on CPU and then silently trains in fp32; the
        pieces it would have wired are wired here after `prepare()`: the scaler, native AMP,
        each prepared optimizer's patched step, and the trainer's autocast context.
        """
        from accelerate.optimizer import patch_optimizer_step

        scaler = torch.amp.GradScaler(
            "cpu",
            init_scale=float(os.environ.get("WORKBENCH_LOSS_SCALE_INIT", 65536.0)),
            growth_interval=int(os.environ.get("WORKBENCH_LOSS_SCALE_GROWTH_INTERVAL", 2000)),
        )
        accelerator.scaler = scaler
        accelerator.native_amp = True
        accelerator.state._mixed_precision = "fp16"
        for optimizer in accelerator._optimizers:
            optimizer.scaler = scaler
            optimizer._accelerate_step_called = False
            optimizer._optimizer_original_step_method = optimizer.optimizer.step
            optimizer._optimizer_patched_step_method = patch_optimizer_step(optimizer, optimizer.optimizer.step)

        def fp16_autocast(cache_enabled: bool | None = True):
            return torch.autocast("cpu", dtype=torch.float16, cache_enabled=cache_enabled)

        self.trainer.autocast_smart_context_manager = fp16_autocast

    def _count_tokens(self) -> None:
        """Count tokens per step from tensor shapes (metadata only, no device sync)."""
        original = self.trainer.training_step

        def counting_step(model, inputs, *args, **kwargs):
            ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
            if ids is not None:
                self._tokens += ids.numel()
            return original(model, inputs, *args, **kwargs)

        self.trainer.training_step = counting_step

    def _hook_overflow_injection(self) -> None:
        """Debug option: turn one gradient to inf during backward at chosen optimizer steps,
        before the scaler unscales, so the scaler sees a real overflow and skips the step."""
        if not self.inject_steps:
            return
        trainable = next((p for p in self.trainer.model.parameters() if p.requires_grad), None)
        if trainable is not None:
            trainable.register_hook(lambda grad: grad * float("inf") if self._inject_now else grad)

    def _hook_nan_injection(self) -> None:
        """Debug option ([debug] inject_nan_steps): the loss of the chosen optimizer steps is
        multiplied by NaN before backward, as a real NaN loss would be."""
        if not self.nan_steps:
            return
        original = self.trainer.compute_loss

        def nan_loss(model, inputs, *args, **kwargs):
            result = original(model, inputs, *args, **kwargs)
            if not self._nan_now:
                return result
            if isinstance(result, tuple):
                return (result[0] * float("nan"), *result[1:])
            return result * float("nan")

        self.trainer.compute_loss = nan_loss

    def _scaler_description(self) -> tuple[str | None, str]:
        accelerator = self.trainer.accelerator
        if self._deepspeed_optimizer() is not None and self.trainer.args.fp16:
            return "DeepSpeedDynamicLossScaler", "DeepSpeed keeps its own fp16 loss scaler"
        if accelerator.scaler is not None:
            return type(accelerator.scaler).__name__, "fp16 needs dynamic loss scaling (small gradients underflow)"
        if self.trainer.args.bf16:
            return None, "bf16 has fp32's exponent range: gradients do not underflow, no loss scaling"
        return None, "fp32 training: no loss scaling"

    def _deepspeed_optimizer(self) -> Any:
        engine = getattr(self.trainer, "deepspeed", None) or getattr(self.trainer, "model_wrapped", None)
        optimizer = getattr(engine, "optimizer", None)
        return optimizer if hasattr(optimizer, "cur_scale") else None

    # ------------------------------------------------------------ save on demand / on signal (#27)

    def _install_save_signals(self, profile: dict[str, Any]) -> None:
        names = ["SIGUSR1"] + (["SIGTERM"] if profile.get("run", {}).get("save_on_term") is True else [])
        for name in names:
            try:
                signal.signal(getattr(signal, name), self._on_save_signal)
            except (ValueError, OSError):  # not the main thread: the request file still works
                pass

    def _on_save_signal(self, signum: int, _frame: Any) -> None:
        self._signalled = signal.Signals(signum).name  # acted on at the end of the current step

    def _pending_request(self) -> tuple[int, str | None]:
        """(0 nothing, 1 save, 2 or more: save and stop) and why, agreed by every rank: the largest code of
        any rank wins, and a rank that did not see the ask itself takes the reason from the code."""
        code, reason = 0, None
        if self._signalled is not None:
            reason, self._signalled = self._signalled, None
            code = SIGNAL_CODES.get(reason, 2)
        elif _rank() == 0:
            request = take_save_request(self._run_dir)
            if request is not None:
                code, reason = (2 if request.action == "stop" else 1), request.reason
        accelerator = self.trainer.accelerator
        if accelerator.num_processes > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            agreed = torch.tensor([code], dtype=torch.int64, device=accelerator.device)
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            if int(agreed.item()) != code:
                code = int(agreed.item())
                reason = CODE_REASONS.get(code, "asked on another rank")
        return code, reason

    def _take_requests(self, state: Any, control: Any) -> None:
        code, reason = self._pending_request()
        if code == 0:
            return
        control.should_save = True
        self._requested = reason
        if code >= 2:
            control.should_training_stop = True
            self._stop_reason = f"saved and stopped on {reason}" if reason and reason.startswith("SIG") else \
                f"saved and stopped: {reason}"

    # ------------------------------------------------------------ per step

    def on_step_begin(self, args, state, control, **kwargs):
        if _inject_oom_step() == state.global_step + 1:  # test hook of the queue's OOM retry (#25)
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected at step {state.global_step + 1} by "
                                              f"{INJECT_OOM_ENV})")
        self._inject_now = (state.global_step + 1) in self.inject_steps
        self._nan_now = (state.global_step + 1) in self.nan_steps

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
        self._take_requests(state, control)
        # the flow callback (called first) has decided: evaluation, then saving, follow this step
        if control.should_evaluate:
            self._end_phase(state, "eval")
        elif control.should_save:
            self._end_phase(state, "save")
        self._count_overflow()

    def _count_overflow(self) -> None:
        """The loss scaler's drops, compared as device tensors (no synchronisation)."""
        scaler = self.trainer.accelerator.scaler
        scale = getattr(scaler, "_scale", None)
        if scale is None:
            return
        if self._prev_scale is None:
            self._prev_scale = scale.detach().clone()
            self._drops = torch.zeros((), dtype=torch.int64, device=scale.device)
            # the very first step starts from the initial scale, which we know exactly
            initial = torch.full_like(scale, float(scaler._init_scale))
            self._drops += (scale < initial).to(torch.int64)
            return
        self._drops += (scale < self._prev_scale).to(torch.int64)
        self._prev_scale.copy_(scale)

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
            **self._loss_scale_fields(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            event["cuda"] = [_cuda_memory(torch.cuda.current_device())]
        self.writer.write("log", **event)

    def _loss_scale_fields(self) -> dict[str, Any]:
        ds_optimizer = self._deepspeed_optimizer()
        if ds_optimizer is not None and self.trainer.args.fp16:
            engine = getattr(self.trainer, "deepspeed", None) or self.trainer.model_wrapped
            skipped = int(getattr(engine, "skipped_steps", 0))
            return {"loss_scale": float(ds_optimizer.cur_scale), "overflow_count": skipped, "skipped_steps": skipped}
        scaler = self.trainer.accelerator.scaler
        if scaler is None:
            return {"loss_scale": None, "overflow_count": 0, "skipped_steps": 0}
        drops = int(self._drops.item()) if self._drops is not None else 0
        # every GradScaler overflow skips that optimizer step
        return {"loss_scale": float(scaler.get_scale()), "overflow_count": drops, "skipped_steps": drops}

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        clean = {k: _finite_or_none(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
        self.writer.write("eval", step=state.global_step, metrics=clean)
        if self._phase == "eval":
            self._end_phase(state, "save" if control.should_save else "steady_step")

    def on_save(self, args, state, control, **kwargs):
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.writer.write("checkpoint", step=state.global_step, path=path, requested=self._requested)
        self._requested = None
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
            status="stopped" if self._stop_reason else "finished",
            reason=self._stop_reason,
            runtime_seconds=time.monotonic() - self._start,
            peak_rss_bytes=self._peak_rss,
            cuda_peaks=peaks,
            **self._loss_scale_fields(),
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


def _debug_nan_steps(run_dir: Path) -> set[int]:
    """[debug] inject_nan_steps of the run's profile snapshot."""
    return {int(s) for s in _run_profile(run_dir).get("debug", {}).get("inject_nan_steps", [])}


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


callbacks_map["workbench_events"] = WorkbenchEventsCallback
