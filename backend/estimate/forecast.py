"""The forecast a run stores in its folder at launch (predicted vs measured later)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.estimate.fit import detect_gpu_memory_bytes, detect_host_memory_bytes, estimate
from backend.estimate.from_profile import request_from_profile

if TYPE_CHECKING:
    from backend.estimate.calibration import Calibration
    from backend.models.resolved import ResolvedProfile
    from backend.profile import LaunchProfile


def forecast_for_profile(profile: "LaunchProfile", model: str | Path, *, base_dir: Path | None = None,
                         gpu_memory_bytes: int | None = None, on_cpu: bool | None = None,
                         calibration: Calibration | None = None,
                         resolved: ResolvedProfile | None = None) -> dict[str, Any]:
    """`Estimate.to_json()` for the profile, its fit held to the profile's GPUs (`gpu_memory_bytes`, or
    the smallest of its `gpu_ids` on this machine) when their size is known; `on_cpu`: whether the run
    trains on the CPU (its precision there, its host terms), see request_from_profile; None: as it would if
    started on this machine. `calibration`: this machine's (None) unless another is given.

    `model` is what `--model` got: a folder, or a hub id whose cached copy backend.models.refs finds
    (Hugging Face or ModelScope cache). The shape is the exact one when transformers answered
    before (cache), else the formula's; a launch never waits for a child process here. `base_dir`
    resolves the profile's data, whose longest row sizes an unset max_length when swift's report
    on it is already known. `resolved`: the launch's model and datasets as resolved once (its config folder and
    its data are read from it).
    """
    from backend.estimate.from_profile import config_dir_for
    from backend.models.shape_exact import cached_shape

    targets = tuple(profile.tuner.target_modules) or ("all-linear",)
    shape = cached_shape(resolved.config_dir() if resolved else config_dir_for(str(model)), targets)
    memory = gpu_memory_bytes or detect_gpu_memory_bytes(profile.distribution.gpu_ids)
    if on_cpu is None:  # where it would train if started here (the queue keeper's admission asks so)
        from backend.hardware.machine import detect_hardware, trains_on_cpu

        on_cpu = trains_on_cpu(profile.distribution.device, detect_hardware())
    request = request_from_profile(profile, shape, gpu_memory_bytes=memory, base_dir=base_dir, on_cpu=on_cpu,
                                   calibration=calibration, resolved=resolved)
    forecast = estimate(shape, request).to_json()
    forecast["host_memory_bytes"] = detect_host_memory_bytes()
    return forecast
