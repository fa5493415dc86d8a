"""Memory planner: per-GPU and host-RAM forecast of a fine-tune from config.json alone.

The estimate is pure Python (well under a millisecond); the shape comes from transformers itself
(`backend.models.shape_exact`: one child process the first time, cached) or from config.json's
formula (`backend.models.shape_formula.shape_from_config_dir`).

    from backend.estimate import ModelShape, EstimateRequest, estimate, fit_report, render_table
    from backend.models.shape_formula import shape_from_config_dir

    shape = shape_from_config_dir("/models/Qwen2.5-7B-Instruct")
    est = estimate(shape, EstimateRequest(tuner="qlora", max_length=4096))
    est.per_device_total_bytes, est.breakdown, est.seed, est.to_json()

The names below are imported on first use (PEP 562), so that a light submodule (the calibration's hook,
registered at every start-up by backend.cli.wiring) does not load the planner and rich.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.estimate.fit import (
        FitReport,
        StrategyResult,
        detect_gpu_memory_bytes,
        detect_host_memory_bytes,
        estimate,
        fit_report,
        fit_status,
    )
    from backend.estimate.planner import Estimate
    from backend.estimate.report import render_table, render_text
    from backend.estimate.request import EstimateRequest
    from backend.estimate.seed import SeedView, seed_view
    from backend.models.shape import ModelShape
    from backend.models.shape_formula import ConfigError

_HOMES = {
    "backend.estimate.fit": ("FitReport", "StrategyResult", "detect_gpu_memory_bytes", "detect_host_memory_bytes",
                             "estimate", "fit_report", "fit_status"),
    "backend.estimate.planner": ("Estimate",),
    "backend.estimate.report": ("render_table", "render_text"),
    "backend.estimate.request": ("EstimateRequest",),
    "backend.estimate.seed": ("SeedView", "seed_view"),
    "backend.models.shape": ("ModelShape",),
    "backend.models.shape_formula": ("ConfigError",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'backend.estimate' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ConfigError",
    "Estimate",
    "EstimateRequest",
    "FitReport",
    "ModelShape",
    "SeedView",
    "StrategyResult",
    "detect_gpu_memory_bytes",
    "detect_host_memory_bytes",
    "estimate",
    "fit_report",
    "fit_status",
    "render_table",
    "render_text",
    "seed_view",
]
