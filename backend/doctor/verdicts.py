"""The doctor's verdicts: each only when its evidence is there, with that evidence, the profile change and the gain
it expects (and why). Checks that need what this run does not have (a GPU) are kept, skipped, with the reason."""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from backend.doctor.measure import WARMUP_STEPS, Measured
from backend.doctor.offload import Offload
from backend.doctor.peaks import GpuPeak

PADDING_SHARE = 0.15  # of the tokens the model computed on
DATA_WAIT_SHARE = 0.10  # of the training loop's time
EVAL_SHARE = 0.20
EVAL_TARGET = 0.05
SLOW_RANK = 1.2  # a rank's steady step over the median of the others'
WARMUP_FACTOR = 3.0
MAX_WORKERS = 8
OFFLOAD_SHARE = 0.25  # the optimizer step's share of the loop's time with its work in host memory
GPU_OPTIMIZER_SHARE = 0.05  # what an AdamW step on the GPU usually takes of a step (a fused kernel over the weights)


@dataclass(frozen=True)
class Verdict:
    code: str
    said: str  # the finding, one line
    evidence: str
    gain: str  # what it expects, and why
    change: dict[str, Any] = field(default_factory=dict)  # dotted profile keys -> new values
    skipped: str | None = None  # why the check could not run on this run

    def change_text(self) -> str:
        return ", ".join(f"{key} = {_toml(value)}" for key, value in self.change.items())

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "said": self.said, "evidence": self.evidence, "gain": self.gain,
                "change": self.change, "skipped": self.skipped}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class RunSettings:
    """What the run trained with: swift's own arguments (args.json: its defaults filled in) over the profile."""

    args: dict[str, Any]
    world_size: int = 1
    offload: Offload | None = None  # what the run keeps in host memory (backend/doctor/offload.py)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.args.get(key)
        return default if value is None else value


def judge(measured: Measured, settings: RunSettings, peak: GpuPeak | None, on_gpu: bool,
          memory: tuple[int, int] | None = None) -> list[Verdict]:
    """Every verdict whose evidence is there, then the GPU checks this run cannot make (skipped)."""
    found = [v for check in (_padding, _data_wait, _eval_share, _slow_rank, _warmup)
             if (v := check(measured, settings, peak)) is not None]
    return found + _gpu_checks(measured, settings, peak, on_gpu, memory)


def _padding(measured: Measured, settings: RunSettings, peak: GpuPeak | None) -> Verdict | None:
    share = measured.padding_share
    if share is None or share < PADDING_SHARE or settings.get("packing") or settings.get("padding_free"):
        return None
    evidence = (f"{measured.padded_tokens:,} of {measured.real_tokens + measured.padded_tokens:,} tokens in the "
                f"batches were padding (attention masks, every rank)")
    gain = (f"up to {share / (1 - share):.0%} more real tokens per second: the padded positions cost as much as "
            f"real ones in every matmul")
    if peak is not None and peak.flash_attention and importlib.util.find_spec("flash_attn") is not None:
        change: dict[str, Any] = {"extra_swift_args.packing": True}
        if settings.get("attn_impl") not in ("flash_attn", "flash_attention_2", "flash_attention_3"):
            change["extra_swift_args.attn_impl"] = "flash_attn"
        how = "packing (swift needs flash attention for it)"
    elif settings.get("group_by_length"):
        return Verdict("padding", f"pad {share:.0%} of tokens even with rows grouped by length", evidence,
                       gain + "; packing would remove it, but swift 4.6 needs flash attention for packing, which "
                       "this run has not (a GPU of compute capability 8.0 or newer and flash-attn)")
    elif (whole := _every_row_in_a_micro_batch(measured, settings)) is not None:
        rows, batch, accumulation = whole
        half = batch // 2 if batch % 2 == 0 else 1
        more = accumulation * batch // half
        change = {"training.per_device_train_batch_size": half, "training.gradient_accumulation_steps": more,
                  "extra_swift_args.group_by_length": True}
        how = (f"every micro-batch holds all {rows} rows, so rows of like length can share one only in smaller "
               f"ones: {half} rows a micro-batch, {more} micro-batches a step (the same {batch * accumulation} rows "
               f"a step), grouped by length")
    else:
        change = {"extra_swift_args.group_by_length": True}
        how = ("rows of like length batched together (packing would remove all of it, but swift 4.6 needs flash "
               "attention for packing, and this run has none)")
    return Verdict("padding", f"pad {share:.0%} of tokens -> {how}", evidence, gain, change)


def _every_row_in_a_micro_batch(measured: Measured, settings: RunSettings) -> tuple[int, int, int] | None:
    """(training rows, micro-batch, accumulation) when each rank's micro-batch holds its whole share of the
    training set: grouping by length then changes nothing (every batch is the same rows). None otherwise."""
    lead, begin = measured.lead, measured.begin
    per_micro = lead.rows_per_micro_batch if lead else None
    rows = begin.train_rows if begin else None
    if per_micro is None or not rows or per_micro * settings.world_size < rows:
        return None
    batch = int(settings.get("per_device_train_batch_size", 1))
    return (rows, batch, int(settings.get("gradient_accumulation_steps", 1))) if batch >= 2 else None


def _data_wait(measured: Measured, settings: RunSettings, peak: GpuPeak | None) -> Verdict | None:
    share = measured.share("data_wait")
    if share < DATA_WAIT_SHARE:
        return None
    workers = int(settings.get("dataloader_num_workers", 1))
    cpus = max(1, (os.cpu_count() or 1) // max(1, settings.world_size))
    better = max(workers + 1, min(MAX_WORKERS, max(2, cpus)))
    lead = measured.lead
    waited = lead.seconds["data_wait"] if lead else 0.0
    return Verdict(
        "data_wait", f"waiting for data {share:.0%} of step time with dataloader_num_workers = {workers} -> {better}",
        f"the trainer waited {waited:.2f} s for batches over {len(lead.step_seconds) if lead else 0} steps "
        f"(rank {lead.rank if lead else 0})",
        f"up to {share:.0%} of the time back: {better} worker processes prepare the next batches while the model "
        f"computes ({cpus} CPU cores per process here; each worker costs memory)",
        {"training.dataloader_num_workers": better})


def _eval_share(measured: Measured, settings: RunSettings, peak: GpuPeak | None) -> Verdict | None:
    lead = measured.lead
    share = measured.share("eval")
    if lead is None or share < EVAL_SHARE or not lead.step_seconds:
        return None
    every = int(settings.get("eval_steps") or 0) or None
    steps = len(lead.step_seconds)
    evaluations = max(1, steps // every) if every else 1
    per_eval = lead.seconds["eval"] / evaluations
    step = lead.steady_step or statistics.fmean(lead.step_seconds)
    wanted = math.ceil(per_eval * (1 - EVAL_TARGET) / EVAL_TARGET / step)
    if every:
        wanted = max(every + 1, math.ceil(wanted / every) * every)
    return Verdict(
        "eval_share", f"evaluation takes {share:.0%} of wall time -> eval_steps = {wanted}",
        f"{lead.seconds['eval']:.2f} s evaluating, about {per_eval:.2f} s each, against steps of {step:.3f} s "
        f"(eval_steps = {every or 'unset'})",
        f"evaluation falls to about {EVAL_TARGET:.0%} of the time: about {share - EVAL_TARGET:.0%} of the wall "
        f"time goes to training instead (fewer evaluation points on the curve)",
        {"training.eval_steps": wanted})


def _slow_rank(measured: Measured, settings: RunSettings, peak: GpuPeak | None) -> Verdict | None:
    """The rank whose own work per step (data wait + forward, before the gradient exchange) stands out; runs
    without that measurement fall back to the median step."""
    ranks = measured.ranks.values()
    own = {r.rank: r.own_work for r in ranks if r.own_work}
    what, values = ("own work per step (data wait + forward, less waiting for the others)", own) if len(own) == len(measured.ranks) else (
        "median step", {r.rank: r.steady_step for r in ranks if r.steady_step})
    if len(values) < 2:
        return None
    worst = max(values, key=lambda rank: values[rank] or 0.0)
    others = statistics.median(v or 0.0 for rank, v in values.items() if rank != worst)
    ratio = (values[worst] or 0.0) / others if others else 0.0
    if ratio < SLOW_RANK:
        return None
    return Verdict(
        "slow_rank", f"rank {worst} is {ratio:.1f}x slower than the median of the others" + (
            " at its own work: the others wait for it" if values is own else ""),
        f"{what}: {values[worst]:.3f} s on rank {worst}, {others:.3f} s on the others (median)",
        f"the others wait for it at every gradient exchange: up to {1 - 1 / ratio:.0%} of its time if it caught up "
        f"(look at its GPU, its data shard and its host)")


def _warmup(measured: Measured, settings: RunSettings, peak: GpuPeak | None) -> Verdict | None:
    lead = measured.lead
    if lead is None or len(lead.step_seconds) <= 2 * WARMUP_STEPS or not lead.steady_step:
        return None
    first = max(lead.step_seconds[:WARMUP_STEPS])
    ratio = first / lead.steady_step
    if ratio < WARMUP_FACTOR:
        return None
    return Verdict(
        "warmup", f"first steps {ratio:.0f}x slower than steady: compile or warm-up, not a fault",
        f"slowest of the first {WARMUP_STEPS} steps {first:.3f} s, steady median {lead.steady_step:.3f} s",
        "nothing to change: allocations, the optimizer's state and lazy kernels are paid once; the steady pace is "
        "what the run's length depends on")


def _gpu_checks(measured: Measured, settings: RunSettings, peak: GpuPeak | None, on_gpu: bool,
                memory: tuple[int, int] | None) -> list[Verdict]:
    """Micro-batch headroom, gradient checkpointing that is not needed, flash attention, CPU offload: GPU
    questions."""
    if not on_gpu:
        why = "no GPU in this run: "
        return [Verdict("micro_batch", "micro-batch headroom", "", "", skipped=why + "it reads the GPU's measured "
                        "peak memory against its size"),
                Verdict("checkpointing", "gradient checkpointing on a model that fits without it", "", "",
                        skipped=why + "recompute is only worth removing when GPU memory allows"),
                Verdict("flash_attention", "flash attention", "", "",
                        skipped=why + "FlashAttention runs on NVIDIA GPUs of compute capability 8.0 or newer"),
                *_offload_skipped(settings, why)]
    found: list[Verdict] = [v for v in [_offload(measured, settings)] if v is not None]
    batch = int(settings.get("per_device_train_batch_size", 1))
    if memory is not None:
        peak_bytes, total = memory
        if peak_bytes * 2 < total * 0.85:
            found.append(Verdict(
                "micro_batch", f"measured peak {peak_bytes / 2**30:.0f} of {total / 2**30:.0f} GiB at micro-batch "
                f"{batch} -> micro-batch {batch * 2} fits", f"the allocator's peak over the run: "
                f"{peak_bytes / 2**30:.1f} GiB (forecast at {batch * 2}: at most {2 * peak_bytes / 2**30:.1f} GiB, "
                f"activations doubled with the weights counted twice)",
                "fewer, larger matmuls: often 10-30 % more tokens per second on a GPU that is not yet saturated; "
                "keep the global batch by halving gradient_accumulation_steps",
                {"training.per_device_train_batch_size": batch * 2}))
        if settings.get("gradient_checkpointing") and peak_bytes * 1.6 < total * 0.85:
            found.append(Verdict(
                "checkpointing", "gradient checkpointing on a model that fits without it -> off, +30 % expected",
                f"peak {peak_bytes / 2**30:.1f} GiB of {total / 2**30:.0f} GiB with checkpointing on",
                "the backward no longer recomputes the forward: 8·N of FLOPs per token become 6·N (about +30 % "
                "tokens per second); activations grow", {"training.gradient_checkpointing": False}))
    if peak is not None and peak.flash_attention and settings.get("attn_impl") in (None, "eager", "sdpa"):
        installed = importlib.util.find_spec("flash_attn") is not None
        found.append(Verdict(
            "flash_attention", f"no flash attention on a GPU that has it ({peak.name}) -> attn_impl = flash_attn",
            f"attn_impl = {settings.get('attn_impl') or 'unset (sdpa)'}",
            "attention's memory falls from quadratic to linear in the length and its kernels are faster; it also "
            "allows packing" + ("" if installed else " (pip install flash-attn first: it is not installed here)"),
            {"extra_swift_args.attn_impl": "flash_attn"}))
    return found


def _offload_skipped(settings: RunSettings, why: str) -> list[Verdict]:
    if settings.offload is None:
        return []
    return [Verdict("cpu_offload", "CPU offload over a slow link", "", "", skipped=why + (
        f"{settings.offload.engine} offload moves {settings.offload.what} between a GPU and host memory; on a CPU "
        f"nothing is offloaded"))]


def _offload(measured: Measured, settings: RunSettings) -> Verdict | None:
    """Offload's cost shows in the optimizer step: its work waits for the gradients to cross to the host, runs on
    the CPU, and the weights cross back. DeepSpeed runs its step inside the backward (accelerate's engine wrapper
    calls engine.step() there), where the step's phases cannot tell it apart: said, not guessed."""
    offload, lead = settings.offload, measured.lead
    if offload is None or lead is None or not lead.step_seconds:
        return None
    share = measured.share("optimizer")
    if offload.engine == "DeepSpeed" and share == 0:
        return Verdict("cpu_offload", "CPU offload over a slow link", "", "", skipped=(
            f"DeepSpeed offloads {offload.what}, but it steps its optimizer inside the backward (accelerate's "
            "engine wrapper), so the measured phases cannot show the offload's share: compare with a run without "
            "it"))
    if share < OFFLOAD_SHARE:
        return None
    off = ", ".join(f"{key} = {_toml(value)}" for key, value in offload.change.items())
    return Verdict(
        "cpu_offload", f"CPU offload over a slow link: the optimizer step takes {share:.0%} of step time with "
                       f"{offload.what} in host memory -> " + (off or f"{offload.engine} offload off"),
        f"{lead.seconds['optimizer']:.2f} s of {lead.wall:.2f} s in the optimizer step over {len(lead.step_seconds)} "
        f"steps (rank {lead.rank}); {offload.engine} keeps {offload.what} in host memory",
        f"about {max(0.0, share - GPU_OPTIMIZER_SHARE):.0%} of the time back: each step now sends the gradients to "
        f"the host over PCIe, updates the weights on the CPU and sends them back; on the GPU the update takes about "
        f"{GPU_OPTIMIZER_SHARE:.0%} of a step. It needs GPU memory for the optimizer state (AdamW: about 12 bytes per "
        f"trained parameter)" + ("" if offload.change else "; the run's DeepSpeed or FSDP settings come from its own "
                                 "file or arguments: turn offload off there"),
        offload.change)
