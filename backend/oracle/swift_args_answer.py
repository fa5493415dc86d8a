"""The `swift_args` question from the app side: how to ask it and its cached answer.

The child side (backend/oracle/swift_args.py) reads swift's argument parser; backend.swift_schema
turns the answer into the schema the launch floor presents. The estimator reads one rule of the
same answer (which precision swift trains a model's dtype in) from here, a floor below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.oracle import ask, cached

QUESTION = "swift_args"
LIBRARIES = ("ms-swift", "transformers")
# bump when backend/oracle/swift_args.py answers differently (the cache is keyed by the payload)
SCHEMA_PAYLOAD = {"format": 4}


def cached_schema_answer() -> dict[str, Any] | None:
    """swift's argument schema as last asked (never starts a child); None when not asked yet."""
    return cached(QUESTION, SCHEMA_PAYLOAD, libraries=LIBRARIES)


def ask_schema_answer(*, progress: Callable[[str], None] | None = None,
                      cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Ask swift (a child, about 10 s; cached by swift's version)."""
    return ask(QUESTION, SCHEMA_PAYLOAD, libraries=LIBRARIES, progress=progress, timeout=300, cancelled=cancelled)


def precision_by_dtype() -> dict[str, str] | None:
    """swift's own rule, model dtype -> the precision it trains in when the profile leaves it unset;
    None until swift's schema has been read."""
    answer = cached_schema_answer()
    return None if answer is None else dict(answer.get("precision_by_dtype", {}))
