"""When the longest batch lands, and the peak it brings (#37 item 5): the app side of `batch_order`.

The launch's exact argv goes to the oracle question `batch_order` (backend/oracle/batch_order.py: swift
loads, encodes and orders the data with its own code and the run's seed), cached by the libraries'
versions, the argv, the dataset files and the model's small files. The memory planner then forecasts the
peak of that micro-batch (its rows, padded to its longest row) on the device the run trains on.

    found = predict(profile, hardware, base_dir, ask=True)   # ask=False: the cache only, never a child
    found.line()  # "longest batch at step 4,312 of 6,000: 1,912 tokens, peak 71.2 of 80 GiB"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from backend.core.units import GIB, size
from backend.hardware.machine import HardwareInfo
from backend.models.resolved import ResolvedProfile, resolve_profile
from backend.profile import LaunchProfile

QUESTION = "batch_order"
LIBRARIES = ("ms-swift", "transformers", "torch", "datasets")
Progress = Callable[[str], object]


@dataclass(frozen=True)
class LongestBatch:
    step: int  # the optimizer step (1-based, the trainer's global_step once it is done)
    steps: int  # the run's optimizer steps
    padded_tokens: int  # rows x longest row: what the micro-batch holds once padded
    rows: int
    longest_row: int
    peak_bytes: int | None = None  # the forecast at that micro-batch, on the device the run trains on
    capacity_bytes: int | None = None
    on_host: bool = False  # a CPU run: the peak is host RAM

    def line(self) -> str:
        text = f"longest batch at step {self.step:,} of {self.steps:,}: {self.padded_tokens:,} tokens"
        if self.rows > 1:
            text += f" ({self.rows} rows of up to {self.longest_row:,})"
        if self.peak_bytes is not None:
            where = " host RAM" if self.on_host else ""
            text += f", peak {_of(self.peak_bytes, self.capacity_bytes)}{where}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "line": self.line()}


def _of(peak: int, capacity: int | None) -> str:
    """'71.2 of 80 GiB' when both are GiB; a small peak in its own unit: '612.0 MiB of 24.0 GiB'."""
    if capacity is None or peak < GIB:
        return size(peak) if capacity is None else f"{size(peak)} of {size(capacity)}"
    whole = capacity % GIB == 0
    return f"{peak / GIB:,.1f} of {capacity / GIB:,.{0 if whole else 1}f} GiB"


def predict(
    profile: LaunchProfile,
    hardware: HardwareInfo,
    base_dir: Path | None,
    *,
    ask: bool,
    progress: Progress | None = None,
    shape: Any = None,
    resolved: ResolvedProfile | None = None,
) -> LongestBatch | None:
    """The step of the largest micro-batch and its peak; None when not known (`ask=False` and not cached, hub
    data or model, packed data, swift refusing the arguments: validate says why). `resolved`: the launch's
    model and datasets as resolved once (resolved here when None)."""
    order = batch_order(profile, hardware, base_dir, ask=ask, progress=progress, resolved=resolved)
    largest = (order or {}).get("largest")
    if not largest:
        return None
    found = LongestBatch(
        step=int(largest["step"]),
        steps=int(order["steps"]),  # type: ignore[index]
        padded_tokens=int(largest["padded_tokens"]),
        rows=int(largest["rows"]),
        longest_row=int(largest["longest_row"]),
    )
    return _with_peak(found, profile, hardware, base_dir, shape)


CACHED_LOOKUP_BYTES = 16 << 20  # hashing more data than this to look the answer up is too slow for a screen


def known(profile: LaunchProfile, base_dir: Path | None, hardware: HardwareInfo | None = None) -> LongestBatch | None:
    """The answer when swift was asked already and the data is small enough to look it up at once (a screen's
    thread); never a child."""
    from backend.hardware.machine import detect_hardware

    resolved = resolve_profile(profile, base_dir)
    if sum(path.stat().st_size for path in _dataset_files(resolved) if path.is_file()) > CACHED_LOOKUP_BYTES:
        return None
    try:
        return predict(profile, hardware or detect_hardware(), base_dir, ask=False, resolved=resolved)
    except Exception:  # an unbuildable launch, an unreadable file: simply not known
        return None


def batch_order(
    profile: LaunchProfile,
    hardware: HardwareInfo,
    base_dir: Path | None,
    *,
    ask: bool,
    progress: Progress | None = None,
    resolved: ResolvedProfile | None = None,
) -> dict[str, Any] | None:
    """swift's answer (cached), or None."""
    from backend.launch.validate.swift_build import launch_argv
    from backend.oracle import ask_or_cached

    resolved = resolved or resolve_profile(profile, base_dir)
    datasets = _dataset_files(resolved)
    if len(datasets) != len(profile.data.train):  # hub data: swift would download it (the offline rule says so)
        return None
    request = launch_argv(profile, hardware, base_dir, resolved=resolved)
    if request is None:
        return None
    payload, inputs, _ = request
    payload = {**payload, "world_size": profile.distribution.world_size}
    return ask_or_cached(QUESTION, payload, libraries=LIBRARIES, inputs=[*inputs, *datasets], ask_child=ask,
                         asking="asking swift in which order the run's batches come (its loader, template and "
                                "sampler; cached)...", what="for the batch order", timeout=900, progress=progress)


def _dataset_files(resolved: ResolvedProfile) -> list[Path]:
    """The training files swift reads (local or built-in); a hub dataset has none."""
    files = [Path(found.swift.partition("#")[0]) for found in resolved.train if found.swift]
    return [path for path in files if path.exists()]


def _with_peak(
    found: LongestBatch, profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None, shape: Any
) -> LongestBatch:
    """The planner's forecast for that micro-batch: its rows, padded to its longest row."""
    from backend.estimate import estimate
    from backend.estimate.from_profile import request_from_profile, shape_from_profile
    from backend.hardware.machine import trains_on_cpu

    try:
        shape = shape or shape_from_profile(profile, base_dir)
        on_cpu = trains_on_cpu(profile.distribution.device, hardware)
        request = request_from_profile(profile, shape, on_cpu=on_cpu)
        request = replace(
            request,
            batch_size=found.rows,
            max_length=found.longest_row,
            gpu_memory_bytes=_gpu_bytes(hardware),
            host_memory_bytes=hardware.ram_total_bytes or None,
        )
        result = estimate(shape, request)
    except Exception:  # a model whose shape is not known yet: the step stands without its peak
        return found
    if on_cpu:
        return replace(
            found, peak_bytes=result.host_total_bytes, capacity_bytes=request.host_memory_bytes, on_host=True
        )
    return replace(found, peak_bytes=result.per_device_total_bytes, capacity_bytes=request.gpu_memory_bytes)


def _gpu_bytes(hardware: HardwareInfo) -> int | None:
    totals = [gpu.memory_total_bytes for gpu in getattr(hardware, "gpus", []) if gpu.memory_total_bytes]
    return min(totals) if totals else None
