"""Fit verdict, searches for the largest batch and length, the strategy ladder, and speed."""

from __future__ import annotations

from dataclasses import replace

from estimate_helpers import GIB

from backend.estimate import EstimateRequest, ModelShape, estimate, fit_report, fit_status
from backend.estimate.fit import TIGHT_FRACTION, largest_batch_size, largest_max_length, strategy_ladder
from backend.estimate.planner import compute


def total(shape: ModelShape, r: EstimateRequest) -> int:
    return compute(shape, r).per_device_total_bytes


def test_status_thresholds() -> None:
    assert TIGHT_FRACTION == 0.90
    assert fit_status(90, 100) == "fits"
    assert fit_status(91, 100) == "tight"
    assert fit_status(100, 100) == "tight"
    assert fit_status(101, 100) == "does not fit"


def test_largest_batch_size_is_exact(qwen7b: ModelShape) -> None:
    r = EstimateRequest(tuner="qlora", max_length=1024)
    gpu = 40 * GIB
    best = largest_batch_size(qwen7b, r, gpu)
    assert best is not None and best > 1
    assert total(qwen7b, replace(r, batch_size=best)) <= gpu < total(qwen7b, replace(r, batch_size=best + 1))


def test_largest_max_length_is_exact(qwen7b: ModelShape) -> None:
    r = EstimateRequest()
    gpu = 24 * GIB
    best = largest_max_length(qwen7b, r, gpu)
    assert best is not None
    assert total(qwen7b, replace(r, max_length=best)) <= gpu < total(qwen7b, replace(r, max_length=best + 1))


def test_nothing_fits(llama70b: ModelShape) -> None:
    report = fit_report(llama70b, EstimateRequest(tuner="full"), 2 * GIB)
    assert report.status == "does not fit"
    assert report.max_batch_size is None and report.max_length is None
    assert report.cheapest_strategy is None  # even offloading every state leaves the gathered units


def test_offload_rung_must_fit_host_ram(llama70b: ModelShape) -> None:
    """70B full fine-tune on one 24 GB GPU: offloading fits the GPU but needs ~1.1 TB of host RAM."""
    gpu_only = fit_report(llama70b, EstimateRequest(tuner="full"), 24 * GIB)
    assert gpu_only.cheapest_strategy == "FSDP FULL_SHARD + offload"
    with_host = fit_report(llama70b, EstimateRequest(tuner="full"), 24 * GIB, host_memory_bytes=256 * GIB)
    assert with_host.cheapest_strategy is None
    offload = with_host.strategies[-1]
    assert offload.host_total_bytes > 16 * llama70b.total_params  # fp32 params + grads + Adam on the host


def test_length_search_stops_at_the_model_limit(llama7b: ModelShape) -> None:
    report = fit_report(llama7b, EstimateRequest(tuner="qlora"), 140 * GIB)
    assert report.max_length == 4096 and report.max_length_is_model_limit


def test_cheapest_strategy_climbs_the_fsdp_ladder(llama70b: ModelShape) -> None:
    r = EstimateRequest(tuner="full", distribution="ddp", num_gpus=8)
    report = fit_report(llama70b, r, 80 * GIB)
    labels = [s.label for s in report.strategies]
    assert labels == ["no sharding (ddp)", "FSDP SHARD_GRAD_OP", "FSDP FULL_SHARD", "FSDP FULL_SHARD + offload"]
    first_fit = next(s for s in report.strategies if s.fits)
    assert report.cheapest_strategy == first_fit.label
    assert not report.strategies[0].fits  # 70B replicated on every GPU cannot fit 80 GB


def test_deepspeed_requests_climb_zero_stages() -> None:
    labels = [label for label, _ in strategy_ladder(EstimateRequest(distribution="deepspeed", num_gpus=2))]
    assert labels == ["ZeRO-0 (no sharding)", "ZeRO-2", "ZeRO-3", "ZeRO-3 + offload"]


def test_single_gpu_ladder_starts_from_single() -> None:
    label, changes = strategy_ladder(EstimateRequest())[0]
    assert label == "no sharding (single)" and changes["distribution"] == "single"


def test_estimate_attaches_fit_when_gpu_memory_is_known(qwen7b: ModelShape) -> None:
    assert estimate(qwen7b, EstimateRequest()).fit is None
    e = estimate(qwen7b, EstimateRequest(gpu_memory_bytes=24 * GIB))
    assert e.fit is not None and e.fit.per_device_total_bytes == e.per_device_total_bytes
    data = e.to_json()["fit"]
    assert set(data) >= {"status", "max_batch_size", "max_length", "cheapest_strategy", "gpu_memory_bytes"}
    assert data["status"] in ("fits", "tight")


def test_tight_status_on_a_realistic_case(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, EstimateRequest(max_length=2048, gpu_memory_bytes=22 * GIB))
    assert e.fit is not None and e.fit.status == "tight"


# The speed of an estimate (50 ms required) is measured by bench/estimate_bench.py, not asserted here.
