"""Memory-planner tests: put the repository on sys.path, offer the real-model fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # plain `pytest` without an installed package
    sys.path.insert(0, str(REPO))

from estimate_helpers import load_shape  # noqa: E402

from backend.estimate import ModelShape  # noqa: E402


@pytest.fixture
def qwen7b() -> ModelShape:
    return load_shape("qwen2_5_7b")


@pytest.fixture
def llama7b() -> ModelShape:
    return load_shape("llama2_7b")


@pytest.fixture
def llama70b() -> ModelShape:
    return load_shape("llama2_70b")
