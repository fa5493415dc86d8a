"""What a forecast says about one GPU: fits, tight or does not fit, and the strategies tried (no search here:
the planner's Estimate carries a FitReport, and fit.py searches)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TIGHT_FRACTION = 0.90


@dataclass(frozen=True)
class StrategyResult:
    """One rung of the strategy ladder, as forecast."""

    label: str
    per_device_total_bytes: int
    host_total_bytes: int
    fits: bool  # on the GPU, and in host RAM when that is known
    changes: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "per_device_total_bytes": self.per_device_total_bytes,
                "host_total_bytes": self.host_total_bytes, "fits": self.fits, "changes": dict(self.changes)}


@dataclass(frozen=True)
class FitReport:
    gpu_memory_bytes: int
    per_device_total_bytes: int
    status: str  # "fits" | "tight" | "does not fit"
    max_batch_size: int | None  # None: not even batch size 1 fits
    max_length: int | None  # None: not even one token fits
    max_length_is_model_limit: bool  # the search stopped at max_position_embeddings
    cheapest_strategy: str | None  # None: no rung of the ladder fits
    strategies: tuple[StrategyResult, ...]
    host_memory_bytes: int | None = None
    host_fits: bool | None = None  # None: host RAM unknown

    @property
    def utilization(self) -> float:
        return self.per_device_total_bytes / self.gpu_memory_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "status": self.status,
            "utilization": round(self.utilization, 4),
            "tight_threshold": TIGHT_FRACTION,
            "max_batch_size": self.max_batch_size,
            "max_length": self.max_length,
            "max_length_is_model_limit": self.max_length_is_model_limit,
            "cheapest_strategy": self.cheapest_strategy,
            "strategies": [s.to_json() for s in self.strategies],
            "host_memory_bytes": self.host_memory_bytes,
            "host_fits": self.host_fits,
        }


def fit_status(total_bytes: int, gpu_memory_bytes: int) -> str:
    if total_bytes > gpu_memory_bytes:
        return "does not fit"
    return "tight" if total_bytes > TIGHT_FRACTION * gpu_memory_bytes else "fits"
