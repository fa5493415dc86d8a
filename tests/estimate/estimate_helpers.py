"""Helpers shared by the memory-planner tests (a unique module name, so no clash with other suites)."""

from __future__ import annotations

from pathlib import Path

from backend.estimate import ModelShape
from backend.models.shape_formula import shape_from_config_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GIB = 2**30


def load_shape(name: str) -> ModelShape:
    """A real model family's config.json, stored under fixtures/<name>/config.json."""
    return shape_from_config_dir(FIXTURES / name)


def rel_err(value: float, reference: float) -> float:
    return abs(value - reference) / reference
