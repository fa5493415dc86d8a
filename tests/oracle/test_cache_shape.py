"""A kept oracle answer of the wrong shape is treated as absent (asked again), never handed to a caller
that would end in a traceback (`show`, `schema --swift`, `estimate`: #29 Low)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.oracle.cache import OracleCache
from backend.oracle.runner import _key_for
from backend.oracle.swift_args_answer import (
    LIBRARIES,
    QUESTION,
    SCHEMA_PAYLOAD,
    precision_by_dtype,
)
from backend.swift_schema import load_schema

GOOD = {"swift_version": "9.9", "commands": {"sft": {"fields": [
    {"name": "learning_rate", "type": "float", "default": 1e-4, "is_list": False, "choices": None, "help": "lr"}]}},
    "precision_by_dtype": {"float16": "fp16"}}


def _keep(answer: Any) -> None:
    key, _versions = _key_for(QUESTION, SCHEMA_PAYLOAD, LIBRARIES, ())
    OracleCache.default().put(QUESTION, key, answer, {"question": QUESTION})


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("answer", [[1, 2, 3], "swift", {"fields": 5}, {"commands": {"sft": {"fields": 5}}},
                                    {**GOOD, "precision_by_dtype": ["fp16"]}])
def test_a_wrong_shaped_swift_args_answer_is_not_used(answer: Any) -> None:
    _keep(answer)
    assert load_schema(allow_ask=False) is None  # as if never asked: the next ask replaces it
    assert precision_by_dtype() is None


def test_a_swift_args_answer_of_its_shape_is_used() -> None:
    _keep(GOOD)
    schema = load_schema(allow_ask=False)
    assert schema is not None and schema.swift_version == "9.9"
    assert schema.fields()["learning_rate"].summary == "float, swift default 0.0001"
    assert precision_by_dtype() == {"float16": "fp16"}
