"""Forecast-versus-measured helpers: each measurement is matched with the right slice."""

from __future__ import annotations

import pytest

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate.measured import compare, comparable_forecasts, error_percent


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
