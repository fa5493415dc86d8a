"""Forecast versus measurement: which part of the forecast each measured peak should match.

A run stores `Estimate.to_json()` in its folder; its events carry measured peaks. The
measurements see different slices of memory, so each is compared with the matching slice:

* torch.cuda.max_memory_allocated  -> total minus CUDA context and allocator slack
* torch.cuda.max_memory_reserved   -> total minus CUDA context (the caching allocator's pool)
* NVML used memory of the process  -> the whole per-device total (context included)
* host RSS of the process tree     -> the host total per node, divided by the local processes
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backend.contract.events import MemoryPhase

MEASUREMENTS = ("cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "nvml_used_bytes", "host_rss_bytes")


def comparable_forecasts(forecast: dict[str, Any]) -> dict[str, int]:
    """The forecast's bytes for each kind of measurement, from `Estimate.to_json()`."""
    total = forecast["per_device_total_bytes"]
    b = forecast["breakdown"]
    local = max(1, int(forecast.get("request", {}).get("num_gpus", 1)))
    return {
        "cuda_max_allocated_bytes": total - b["cuda_context"] - b["allocator_overhead"],
        "cuda_max_reserved_bytes": total - b["cuda_context"],
        "nvml_used_bytes": total,
        "host_rss_bytes": forecast["host_total_bytes"] // local,
    }


def error_percent(forecast_bytes: float, measured_bytes: float) -> float | None:
    """Signed error of the forecast in percent of the measurement (positive: we said more)."""
    if not measured_bytes:
        return None
    return (forecast_bytes - measured_bytes) / measured_bytes * 100


def compare(forecast: dict[str, Any], measured: dict[str, int | None]) -> dict[str, dict[str, Any]]:
    """One row per measurement present: forecast, measured and error in percent."""
    expected = comparable_forecasts(forecast)
    rows = {}
    for kind in MEASUREMENTS:
        value = measured.get(kind)
        if value is None:
            continue
        rows[kind] = {"forecast_bytes": expected[kind], "measured_bytes": value,
                      "error_percent": error_percent(expected[kind], value)}
    return rows


def phase_forecasts(forecast: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per phase of the forecast's timeline, the bytes each kind of measurement should see (per process).

    The run measures steady steps as one stretch between evaluations and saves, their optimizer steps
    included: that stretch is held to the larger of the forecast's steady and optimizer steps."""
    local = max(1, int(forecast.get("request", {}).get("num_gpus", 1)))
    out: dict[str, dict[str, int]] = {}
    for phase in forecast.get("timeline", []):
        terms, total = phase["gpu_terms"], phase["gpu_total_bytes"]
        context, slack = terms.get("cuda_context", 0), terms.get("allocator_overhead", 0)
        out[phase["phase"]] = {"cuda_max_allocated_bytes": total - context - slack,
                               "cuda_max_reserved_bytes": total - context,
                               "nvml_used_bytes": total,
                               "host_rss_bytes": phase["host_total_bytes"] // local}
    if "steady_step" in out and "optimizer_step" in out:
        out["steady_step"] = {kind: max(value, out["optimizer_step"][kind]) for kind, value in out["steady_step"].items()}
    return out


def compare_phases(forecast: dict[str, Any], measured: Mapping[str, Mapping[str, int | None]]) -> list[dict[str, Any]]:
    """One row per (phase, measurement) measured and forecast, in the timeline's order, with the error."""
    expected = phase_forecasts(forecast)
    rows = []
    for phase, kinds in expected.items():
        for kind, forecast_bytes in kinds.items():
            value = measured.get(phase, {}).get(kind)
            if value:
                rows.append({"phase": phase, "kind": kind, "forecast_bytes": forecast_bytes, "measured_bytes": value,
                             "error_percent": error_percent(forecast_bytes, value)})
    return rows


def keep_phase(kept: dict[str, dict[str, int]], event: MemoryPhase) -> None:
    """Add one `memory_phase` event to the measured peaks per phase (phase -> measurement -> bytes): the
    largest over ranks and recurrences. Host: the process tree's RSS when the event has it."""
    values = {"host_rss_bytes": event.tree_rss_bytes or event.rss_bytes,
              "nvml_used_bytes": max((g.used or 0 for g in event.nvml or []), default=None)}
    for device in event.cuda or []:
        values["cuda_max_allocated_bytes"] = max(values.get("cuda_max_allocated_bytes") or 0, device.max_allocated)
        values["cuda_max_reserved_bytes"] = max(values.get("cuda_max_reserved_bytes") or 0, device.max_reserved)
    phase = kept.setdefault(event.phase, {})
    for kind, value in values.items():
        if value:
            phase[kind] = max(phase.get(kind, 0), value)
