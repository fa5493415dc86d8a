"""The forecast a run stores in its folder at launch (predicted vs measured later)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.estimate.fit import detect_gpu_memory_bytes, detect_host_memory_bytes
from backend.estimate.from_profile import request_from_profile
from backend.estimate.planner import estimate
from backend.estimate.shape import ModelShape

if TYPE_CHECKING:
    from backend.profile import LaunchProfile


def forecast_for_profile(profile: "LaunchProfile", model_dir: Path) -> dict[str, Any]:
    """`Estimate.to_json()` for the profile on this machine's GPUs (fit included when known)."""
    shape = ModelShape.from_config_dir(model_dir)
    request = request_from_profile(profile, shape, gpu_memory_bytes=detect_gpu_memory_bytes())
    forecast = estimate(shape, request).to_json()
    forecast["host_memory_bytes"] = detect_host_memory_bytes()
    return forecast
