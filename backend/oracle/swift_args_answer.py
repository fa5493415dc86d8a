"""The `swift_args` question from the app side: how to ask it and its cached answer.

The child side (backend/oracle/swift_args.py) reads swift's argument parser; backend.launch.swift_schema
turns the answer into the schema the launch floor presents. The estimator reads one rule of the
same answer (which precision swift trains a model's dtype in) from here, a floor below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from backend.oracle import ask, cached
from backend.oracle.cache import register_shape

QUESTION = "swift_args"
LIBRARIES = ("ms-swift", "transformers")
# bump when backend/oracle/swift_args.py answers differently (the cache is keyed by the payload)
SCHEMA_PAYLOAD = {"format": 4}


class FieldShape(msgspec.Struct):
    """One flag as swift_args answers it (what backend.launch.swift_schema reads)."""

    name: str
    type: str
    default: Any
    is_list: bool
    choices: list[Any] | None = None
    help: str = ""
    declared: str = ""
    negations: list[str] = []


class CommandShape(msgspec.Struct):
    fields: list[FieldShape]


class AnswerShape(msgspec.Struct):
    """The swift_args answer: a cache entry of another shape is asked again (OracleCache.get)."""

    commands: dict[str, CommandShape]
    swift_version: str = "unknown"
    deepspeed_presets: list[str] = []
    tuner_defaults: dict[str, dict[str, Any]] = {}
    precision_by_dtype: dict[str, str] = {}


register_shape(QUESTION, lambda answer: msgspec.convert(answer, AnswerShape))


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
