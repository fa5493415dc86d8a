"""Forecast-versus-measured helpers: each measurement is matched with the right slice."""

from __future__ import annotations

import pytest

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate.measured import comparable_forecasts, compare, error_percent


def test_slices_of_the_forecast(qwen7b: ModelShape) -> None:
    data = estimate(qwen7b, EstimateRequest(distribution="ddp", num_gpus=2)).to_json()
    b = data["breakdown"]
    slices = comparable_forecasts(data)
    assert slices["nvml_used_bytes"] == data["per_device_total_bytes"]
    assert slices["cuda_max_reserved_bytes"] == data["per_device_total_bytes"] - b["cuda_context"]
    assert slices["cuda_max_allocated_bytes"] == slices["cuda_max_reserved_bytes"] - b["allocator_overhead"]
    assert slices["host_rss_bytes"] == data["host_total_bytes"] // 2


def test_error_percent_sign_and_missing_values() -> None:
    assert error_percent(110, 100) == pytest.approx(10)
    assert error_percent(90, 100) == pytest.approx(-10)
    assert error_percent(90, 0) is None


def test_compare_reports_only_what_was_measured(qwen7b: ModelShape) -> None:
    data = estimate(qwen7b, EstimateRequest()).to_json()
    rows = compare(data, {"cuda_max_reserved_bytes": 20 * 2**30, "nvml_used_bytes": None})
    assert list(rows) == ["cuda_max_reserved_bytes"]
    assert rows["cuda_max_reserved_bytes"]["measured_bytes"] == 20 * 2**30
    assert rows["cuda_max_reserved_bytes"]["error_percent"] is not None


def test_phases_compare_each_measurement_with_its_phase() -> None:
    """#26: a run's memory_phase measurements beside the timeline's forecast. Steady steps are measured
    as one stretch with their optimizer steps, so that stretch is held to the larger of the two phases."""
    from backend.estimate.measured import compare_phases

    mib = 2**20
    forecast = {"request": {"num_gpus": 2}, "timeline": [
        {"phase": "first_step", "gpu_total_bytes": 1100 * mib, "host_total_bytes": 8000 * mib,
         "gpu_terms": {"weights": 400 * mib, "cuda_context": 600 * mib, "allocator_overhead": 100 * mib}},
        {"phase": "optimizer_step", "gpu_total_bytes": 1800 * mib, "host_total_bytes": 8000 * mib,
         "gpu_terms": {"optimizer_states": 1100 * mib, "cuda_context": 600 * mib, "allocator_overhead": 100 * mib}},
        {"phase": "steady_step", "gpu_total_bytes": 1500 * mib, "host_total_bytes": 8000 * mib,
         "gpu_terms": {"weights": 800 * mib, "cuda_context": 600 * mib, "allocator_overhead": 100 * mib}},
    ]}
    measured = {"first_step": {"cuda_max_allocated_bytes": 500 * mib, "host_rss_bytes": 5000 * mib},
                "steady_step": {"cuda_max_reserved_bytes": 1200 * mib}}
    rows = [(r["phase"], r["kind"], r["forecast_bytes"] // mib, r["measured_bytes"] // mib, r["error_percent"])
            for r in compare_phases(forecast, measured)]
    assert rows == [
        ("first_step", "cuda_max_allocated_bytes", 400, 500, -20.0),  # 1100 - context - slack
        ("first_step", "host_rss_bytes", 4000, 5000, -20.0),  # the node's 8000 over 2 processes
        ("steady_step", "cuda_max_reserved_bytes", 1200, 1200, 0.0),  # max(1500, 1800) - context
    ]
