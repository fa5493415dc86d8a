"""The fp16 loss scale inside swift's training process (loaded by workbench_callback.py): a real GradScaler for
a CPU fp16 run (accelerate builds none on CPU), which scaler there is and why, and the scaler's overflows
counted as device tensors (no synchronisation), also for DeepSpeed's own scaler."""

from __future__ import annotations

import os
from typing import Any

import torch


class LossScale:
    """The trainer's loss scaler, watched: overflows counted at every step end, reported in each log."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self._prev_scale: torch.Tensor | None = None
        self._drops: torch.Tensor | None = None

    def install_cpu_scaler(self, accelerator: Any) -> None:
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

    def description(self) -> tuple[str | None, str]:
        """The scaler's name (None: none) and why there is one or not."""
        accelerator = self.trainer.accelerator
        if self.deepspeed_optimizer() is not None and self.trainer.args.fp16:
            return "DeepSpeedDynamicLossScaler", "DeepSpeed keeps its own fp16 loss scaler"
        if accelerator.scaler is not None:
            return type(accelerator.scaler).__name__, "fp16 needs dynamic loss scaling (small gradients underflow)"
        if self.trainer.args.bf16:
            return None, "bf16 has fp32's exponent range: gradients do not underflow, no loss scaling"
        return None, "fp32 training: no loss scaling"

    def deepspeed_optimizer(self) -> Any:
        engine = getattr(self.trainer, "deepspeed", None) or getattr(self.trainer, "model_wrapped", None)
        optimizer = getattr(engine, "optimizer", None)
        return optimizer if hasattr(optimizer, "cur_scale") else None

    def count_overflow(self) -> None:
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

    def fields(self) -> dict[str, Any]:
        """The loss scale, the overflows and the steps skipped so far, as a log or run_end event holds them."""
        ds_optimizer = self.deepspeed_optimizer()
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
