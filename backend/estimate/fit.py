"""Will it fit? Status against a GPU's memory, and searches for what would fit.

Status: "fits" up to 90 % of the GPU's memory, "tight" above that (allocator spikes and
evaluation batches live in the last 10 %), "does not fit" above 100 %. Every forecast is
monotone in batch size and sequence length, so both searches are binary searches (each
estimate is well under a millisecond).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from backend.estimate.planner import Estimate, compute
from backend.estimate.request import EstimateRequest
from backend.estimate.verdicts import TIGHT_FRACTION as TIGHT_FRACTION  # re-exported: callers know it as fit's
from backend.estimate.verdicts import FitReport as FitReport
from backend.estimate.verdicts import StrategyResult as StrategyResult
from backend.estimate.verdicts import fit_status as fit_status
from backend.models.shape import ModelShape

MAX_BATCH_SEARCHED = 4096
MAX_LENGTH_SEARCHED = 1 << 20  # when config.json gives no max_position_embeddings


def fit_report(shape: ModelShape, request: EstimateRequest, gpu_memory_bytes: int,
               base: Estimate | None = None, host_memory_bytes: int | None = None) -> FitReport:
    """Status of `request`, the largest batch size and max length that fit, the cheapest strategy.

    With `host_memory_bytes` (per node) a strategy must also fit in host RAM, which is what
    rules out offloading a 70B model's optimizer to a 256 GB machine.
    """
    request = replace(request, gpu_memory_bytes=None, host_memory_bytes=None)
    base = base or compute(shape, request)
    total = base.per_device_total_bytes
    limit = shape.max_position_embeddings or MAX_LENGTH_SEARCHED
    best_length = largest_max_length(shape, request, gpu_memory_bytes)
    ladder = strategy_results(shape, request, gpu_memory_bytes, host_memory_bytes)
    return FitReport(
        gpu_memory_bytes=gpu_memory_bytes,
        per_device_total_bytes=total,
        status=fit_status(total, gpu_memory_bytes),
        max_batch_size=largest_batch_size(shape, request, gpu_memory_bytes),
        max_length=best_length,
        max_length_is_model_limit=best_length == limit,
        cheapest_strategy=next((s.label for s in ladder if s.fits), None),
        strategies=ladder,
        host_memory_bytes=host_memory_bytes,
        host_fits=None if host_memory_bytes is None else base.host_total_bytes <= host_memory_bytes,
    )


def _fits(shape: ModelShape, request: EstimateRequest, gpu_memory_bytes: int) -> bool:
    return compute(shape, request).per_device_total_bytes <= gpu_memory_bytes


def _largest(ok: Callable[[int], bool], limit: int) -> int | None:
    """Largest n in [1, limit] with ok(n), for a monotone ok: doubling, then bisection."""
    if not ok(1):
        return None
    low = 1
    while low < limit and ok(min(2 * low, limit)):
        low = min(2 * low, limit)
    if low == limit:
        return low
    high = min(2 * low, limit)  # the first candidate that failed
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def largest_batch_size(shape: ModelShape, request: EstimateRequest, gpu_memory_bytes: int) -> int | None:
    return _largest(lambda b: _fits(shape, replace(request, batch_size=b), gpu_memory_bytes), MAX_BATCH_SEARCHED)


def largest_max_length(shape: ModelShape, request: EstimateRequest, gpu_memory_bytes: int) -> int | None:
    limit = shape.max_position_embeddings or MAX_LENGTH_SEARCHED
    return _largest(lambda n: _fits(shape, replace(request, max_length=n), gpu_memory_bytes), limit)


def strategy_ladder(request: EstimateRequest) -> list[tuple[str, dict[str, Any]]]:
    """Cheapest first: no sharding -> shard grads+optimizer -> shard everything -> + CPU offload.

    DeepSpeed requests climb ZeRO stages; everything else climbs FSDP strategies.
    """
    if request.distribution == "deepspeed":
        return [
            ("ZeRO-0 (no sharding)", {"distribution": "deepspeed", "zero_stage": 0, "offload": False}),
            ("ZeRO-2", {"distribution": "deepspeed", "zero_stage": 2, "offload": False}),
            ("ZeRO-3", {"distribution": "deepspeed", "zero_stage": 3, "offload": False}),
            ("ZeRO-3 + offload", {"distribution": "deepspeed", "zero_stage": 3, "offload": True}),
        ]
    plain = "ddp" if request.world_size > 1 else "single"
    return [
        (f"no sharding ({plain})", {"distribution": plain, "offload": False}),
        ("FSDP SHARD_GRAD_OP", {"distribution": "fsdp", "fsdp_strategy": "SHARD_GRAD_OP", "offload": False}),
        ("FSDP FULL_SHARD", {"distribution": "fsdp", "fsdp_strategy": "FULL_SHARD", "offload": False}),
        ("FSDP FULL_SHARD + offload", {"distribution": "fsdp", "fsdp_strategy": "FULL_SHARD", "offload": True}),
    ]


def strategy_results(shape: ModelShape, request: EstimateRequest, gpu_memory_bytes: int,
                     host_memory_bytes: int | None = None) -> tuple[StrategyResult, ...]:
    results = []
    for label, changes in strategy_ladder(request):
        rung = compute(shape, replace(request, **changes))
        gpu, host = rung.per_device_total_bytes, rung.host_total_bytes
        fits = gpu <= gpu_memory_bytes and (host_memory_bytes is None or host <= host_memory_bytes)
        results.append(StrategyResult(label, gpu, host, fits, changes))
    return tuple(results)


def detect_host_memory_bytes() -> int | None:
    """This machine's total RAM (psutil), or None when it cannot be read."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().total)


def detect_gpu_memory_bytes(gpu_ids: list[int] | None = None) -> int | None:
    """Smallest total memory among this machine's NVIDIA GPUs (NVML) that `gpu_ids` names (all when
    empty or None), or None without one."""
    try:
        from backend.hardware.machine import detect_hardware
    except ImportError:  # hardware layer unavailable (e.g. psutil missing)
        return None
    return gpu_memory_for(detect_hardware().gpus, gpu_ids)


def gpu_memory_for(gpus: Sequence[Any], gpu_ids: list[int] | None) -> int | None:
    """The memory a profile's forecast is held to: the smallest of the GPUs it runs on (NVML indices
    `gpu_ids`; every GPU when empty), None when none of them says its size."""
    chosen = [g for g in gpus if not gpu_ids or g.index in gpu_ids]
    sizes = [g.memory_total_bytes for g in chosen if g.memory_total_bytes]
    return min(sizes) if sizes else None


def estimate(shape: ModelShape, request: EstimateRequest) -> Estimate:
    """Forecast one configuration; adds a fit report when `request.gpu_memory_bytes` is set."""
    result = compute(shape, request)
    if request.gpu_memory_bytes:
        report = fit_report(shape, request, request.gpu_memory_bytes, base=result,
                            host_memory_bytes=request.host_memory_bytes)
        result = replace(result, fit=report)
    return result
