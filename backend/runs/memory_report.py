"""Predicted vs measured memory of a run: the forecast stored at launch against the peaks
the events carry (CUDA max reserved per device, host RSS of each rank)."""

from __future__ import annotations

import json
from typing import Any

from backend.events import EventReader
from backend.runs.layout import RunFolder

GIB = 2**30


def measured_peaks(run: RunFolder) -> dict[str, Any]:
    """Peak CUDA reserved / allocated (any device) and peak RSS per rank, from all events."""
    cuda_reserved = cuda_allocated = 0
    rss_by_rank: dict[int, int] = {}
    for event in EventReader(run.events_path).read_new():
        rank = event.get("rank", 0)
        rss = event.get("peak_rss_bytes") or event.get("rss_bytes")
        if rss:
            rss_by_rank[rank] = max(rss_by_rank.get(rank, 0), rss)
        for device in event.get("cuda") or event.get("cuda_peaks") or []:
            cuda_reserved = max(cuda_reserved, device.get("max_reserved", 0))
            cuda_allocated = max(cuda_allocated, device.get("max_allocated", 0))
    return {"cuda_max_reserved_bytes": cuda_reserved or None, "cuda_max_allocated_bytes": cuda_allocated or None,
            "rss_peak_bytes_by_rank": rss_by_rank}


def _error_percent(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


def memory_comparison(run: RunFolder) -> dict[str, Any]:
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        forecast = {}
    measured = measured_peaks(run)
    lines: list[str] = []
    per_device = forecast.get("per_device_total_bytes")
    host = forecast.get("host_total_bytes")
    if forecast.get("error"):
        lines.append(f"memory forecast: {forecast['error']}")
    gpu_error = _error_percent(per_device, measured["cuda_max_reserved_bytes"])
    if measured["cuda_max_reserved_bytes"]:
        lines.append(
            f"GPU memory per device: forecast {per_device / GIB if per_device else float('nan'):.2f} GiB, "
            f"measured peak reserved {measured['cuda_max_reserved_bytes'] / GIB:.2f} GiB"
            + (f" (error {gpu_error:+.0f}%)" if gpu_error is not None else "")
        )
    rss = max(measured["rss_peak_bytes_by_rank"].values(), default=None)
    host_error = _error_percent(host, rss)
    if rss:
        lines.append(
            f"host RAM per process: forecast {host / GIB if host else float('nan'):.2f} GiB, measured peak RSS "
            f"{rss / GIB:.2f} GiB" + (f" (error {host_error:+.0f}%)" if host_error is not None else "")
            + ("; on CPU the RSS also holds torch/swift's own ~0.5 GiB, which the forecast counts as overhead"
               if not measured["cuda_max_reserved_bytes"] else "")
        )
    return {"forecast": forecast, "measured": measured, "gpu_error_percent": gpu_error,
            "host_error_percent": host_error, "lines": lines}
