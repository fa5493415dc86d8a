"""Detectors of the machine, fed readings: GPU memory near full, host RAM low, the disk short of the next
checkpoint. Each raises once per episode (ThresholdLatch)."""

from __future__ import annotations

from backend.core.units import size
from backend.watch.finding import Finding


class ThresholdLatch:
    """Once-per-episode alerting for a reading compared with a limit (memory, disk)."""

    def __init__(self) -> None:
        self._raised: set[str] = set()

    def check(self, key: str, bad: bool) -> bool:
        """True when `bad` newly became true for `key`."""
        if not bad:
            self._raised.discard(key)
            return False
        if key in self._raised:
            return False
        self._raised.add(key)
        return True


class GpuMemoryDetector:
    kind = "gpu_memory"

    def __init__(self, fraction: float):
        self.fraction = fraction
        self._latch = ThresholdLatch()

    def on_sample(self, gpus: list[tuple[int, int | None, int | None]], step: int | None) -> list[Finding]:
        """`gpus`: (index, used bytes, total bytes) per card."""
        found = []
        for index, used, total in gpus:
            if not used or not total:
                continue
            if self._latch.check(str(index), used / total > self.fraction):
                found.append(Finding(self.kind, f"GPU {index} memory at {used / total:.0%} ({size(used)} of "
                                                f"{size(total)}); next: out of memory", step,
                                     {"gpu": index, "used_bytes": used, "total_bytes": total,
                                      "fraction": self.fraction}))
        return found


class HostMemoryDetector:
    kind = "host_memory"

    def __init__(self, min_fraction: float):
        self.min_fraction = min_fraction
        self._latch = ThresholdLatch()

    def on_sample(self, available: int, total: int, step: int | None) -> list[Finding]:
        if not total or not self._latch.check("host", available / total < self.min_fraction):
            return []
        return [Finding(self.kind, f"host RAM low: {size(available)} available of {size(total)} "
                                   f"({available / total:.0%}); the kernel's OOM killer is next", step,
                        {"available_bytes": available, "total_bytes": total, "min_fraction": self.min_fraction})]


class DiskDetector:
    kind = "disk"

    def __init__(self, margin: float):
        self.margin = margin
        self._latch = ThresholdLatch()

    def on_sample(self, free: int, next_checkpoint: int | None, folder: str, step: int | None,
                  basis: str = "") -> list[Finding]:
        if not next_checkpoint:
            return []
        if not self._latch.check("disk", free < self.margin * next_checkpoint):
            return []
        return [Finding(self.kind, f"disk low on {folder}: {size(free)} free, the next checkpoint needs about "
                                   f"{size(next_checkpoint)}", step,
                        {"free_bytes": free, "next_checkpoint_bytes": next_checkpoint, "margin": self.margin,
                         "folder": folder, "forecast_from": basis})]
