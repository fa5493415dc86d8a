"""The one rule that chooses GPUs: nvitop's own `select_devices`, asked over readings of free memory.

The readings are each GPU's free memory as NVML tells it (other processes counted), read now (a launch,
golden prompts beside a training) or recorded by the queue's keeper. The rule takes them instead of
opening NVML itself, so whoever read them decides when, and admission is testable without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FreeMemory = Mapping[int, int | None]  # GPU index (NVML numbering) -> free bytes, None when NVML did not tell


@dataclass
class _Reading:
    """What `select_devices` reads of a device and of its snapshot, from one reading: a stand-in for
    nvitop's Device and Snapshot. A reading holds free memory only: the keys nvitop sorts by after it are
    the same for every GPU (a NaN would stop its comparison), so a tie falls to its last key, the index."""

    index: int
    memory_free: float
    memory_used: float = 0.0
    gpu_utilization: float = 0.0
    memory_utilization: float = 0.0
    is_mig_device: bool = False
    loosen_constraints: int = 0  # select_devices counts the criteria it loosened here

    @property
    def physical_index(self) -> int:
        return self.index

    @property
    def real(self) -> _Reading:
        return self

    def to_leaf_devices(self) -> list[_Reading]:
        return [self]

    def as_snapshot(self) -> _Reading:
        return self


def choose_gpus(free: FreeMemory, count: int, min_free_bytes: int | None = None) -> list[int]:
    """Up to `count` GPUs of `free`, in index order, as nvitop's `select_devices` picks them: with at least
    `min_free_bytes` free, most free memory first (at a tie the higher index: nvitop keeps GPU 0 for the
    desktop). GPUs whose free memory is unknown come after every known one (nvitop would rank a NaN
    first), and never when a minimum is asked."""
    if count < 1:
        return []
    import nvitop  # its select_devices reads the stand-ins only: NVML is not opened here

    known = [_Reading(index, float(bytes_free)) for index, bytes_free in free.items() if bytes_free is not None]
    chosen: list[Any] = (
        nvitop.select_devices(known, format="index", force_index=True, max_count=count, min_free_memory=min_free_bytes)
        if known
        else []
    )
    picked = [int(index) for index in chosen]
    if min_free_bytes is None:
        unknown = sorted(index for index, bytes_free in free.items() if bytes_free is None)
        picked += unknown[: count - len(picked)]
    return sorted(picked)
