"""Predicted vs measured memory of a run: the forecast stored at launch against the peaks the
events carry (CUDA max reserved / allocated per device, host RSS of each rank)."""

from __future__ import annotations

import json
from typing import Any

from backend.contract.events import EventReader, Log, MemoryPhase, RunBegin, RunEnd
from backend.core.units import gib, size
from backend.estimate.measured import compare, compare_phases, keep_phase
from backend.rundir.layout import RunFolder

LABELS = {
    "cuda_max_allocated_bytes": "GPU peak allocated (torch)",
    "cuda_max_reserved_bytes": "GPU peak reserved (torch)",
    "nvml_used_bytes": "GPU used (NVML)",
    "host_rss_bytes": "host RSS per process",
}


def measured_peaks(run: RunFolder) -> dict[str, Any]:
    """Peaks over every event of the run (streamed, a block at a time): the largest device and the
    largest rank; `problems` says what lines of the file were not events."""
    peaks: dict[str, int] = {}

    def keep(kind: str, value: int | None) -> None:
        if value:
            peaks[kind] = max(peaks.get(kind, 0), int(value))

    begin_rss: int | None = None
    phases: dict[str, dict[str, int]] = {}  # phase -> measurement -> the largest over ranks and recurrences
    reader = EventReader(run.events_path)
    for event in reader.each():
        if isinstance(event, RunBegin) and event.rank == 0 and begin_rss is None:
            begin_rss = event.rss_bytes
        if isinstance(event, (RunBegin, Log)):
            keep("host_rss_bytes", event.rss_bytes)
        if isinstance(event, RunEnd):
            keep("host_rss_bytes", event.peak_rss_bytes)
        if isinstance(event, MemoryPhase):
            keep_phase(phases, event)
        for device in (event.cuda or [] if isinstance(event, Log) else
                       event.cuda_peaks if isinstance(event, RunEnd) else []):
            keep("cuda_max_reserved_bytes", device.max_reserved)
            keep("cuda_max_allocated_bytes", device.max_allocated)
    result: dict[str, Any] = {kind: peaks.get(kind) for kind in LABELS}
    result["problems"] = reader.problems()
    result["phases"] = phases
    # what training added on top of the loaded model (CPU runs: the closest thing to the GPU terms)
    result["host_rss_growth_bytes"] = peaks["host_rss_bytes"] - begin_rss if begin_rss and peaks.get(
        "host_rss_bytes") else None
    return result


# forecast terms that appear only once training starts (the model itself is loaded before run_begin)
TRAINING_TERMS = ("gradients", "optimizer_states", "activations", "logits", "backward_working", "master_weights",
                  "autocast_copies")


def memory_comparison(run: RunFolder) -> dict[str, Any]:
    """Forecast, measured peaks, rows of error in percent, and lines to print."""
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        forecast = {"error": "no forecast stored for this run"}
    measured = measured_peaks(run)
    said = [f"events: {problem}" for problem in measured["problems"]]
    if "per_device_total_bytes" not in forecast:
        return {"forecast": forecast, "measured": measured, "rows": {},
                "lines": [f"memory forecast: {forecast.get('error', 'unavailable')}", *said]}
    rows = compare(forecast, measured)
    lines = [f"memory forecast: {gib(forecast['per_device_total_bytes'], 2)} GiB per GPU, "
             f"{gib(forecast['host_total_bytes'], 2)} GiB host RAM"]
    for kind, row in rows.items():
        error = row["error_percent"]
        lines.append(f"{LABELS[kind]}: forecast {gib(row['forecast_bytes'], 2)} GiB, measured "
                     f"{gib(row['measured_bytes'], 2)} GiB" + (f", error {error:+.0f}%" if error is not None else ""))
    growth = measured["host_rss_growth_bytes"]
    if measured["cuda_max_reserved_bytes"] is None and growth is not None:
        training = sum(forecast["breakdown"].get(term, 0) for term in TRAINING_TERMS)
        rows["host_rss_growth_bytes"] = {"forecast_bytes": training, "measured_bytes": growth,
                                         "error_percent": 100 * (training - growth) / growth if growth else None}
        lines.append(f"CPU run, RSS growth during training: forecast {size(training)} (gradients, optimizer, "
                     f"activations, logits), measured {size(growth)}. RSS also holds the Python/torch/swift "
                     "runtime and allocator caching, and CPU activations are freed eagerly, so this compares "
                     "orders of magnitude, not the GPU forecast.")
    phase_rows = compare_phases(forecast, measured["phases"])
    lines += _phase_lines(forecast, phase_rows)
    return {"forecast": forecast, "measured": measured, "rows": rows, "phase_rows": phase_rows,
            "lines": lines + said}


def _phase_lines(forecast: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Forecast vs measured per phase of the timeline (#26): which phase peaked, and by how much we erred."""
    if not rows:
        return []
    lines = [f"per phase (forecast peak: {forecast.get('peak_phase', '?').replace('_', ' ')}):"]
    for row in rows:
        error = row["error_percent"]
        lines.append(f"  {row['phase'].replace('_', ' ')}, {LABELS[row['kind']]}: forecast "
                     f"{gib(row['forecast_bytes'], 2)} GiB, measured {gib(row['measured_bytes'], 2)} GiB"
                     + (f", error {error:+.0f}%" if error is not None else ""))
    return lines
