"""A kept oracle answer of the wrong shape is treated as absent (asked again), never handed to a caller
that would end in a traceback (`show`, `schema --swift`, `estimate`: #29 Low)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.launch.swift_schema import load_schema
from backend.oracle.cache import OracleCache
from backend.oracle.runner import _key_for
from backend.oracle.swift_args_answer import (
    LIBRARIES,
    QUESTION,
    SCHEMA_PAYLOAD,
    precision_by_dtype,
)

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


# -- the other questions the app reads: model_shape, swift_data_child, swift_registry

def _keep_for(question: str, payload: dict[str, Any], libraries: tuple[str, ...], answer: Any,
              inputs: tuple[Path, ...] = ()) -> None:
    key, _versions = _key_for(question, payload, libraries, inputs)
    OracleCache.default().put(question, key, answer, {"question": question})


TINY_CONFIG = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
               "intermediate_size": 128, "vocab_size": 638, "tie_word_embeddings": True}


@pytest.mark.parametrize("answer", [{"known": "yes"}, {"known": True, "sizes": {"hidden_size": 64}},
                                    {"known": True, "num_layers": 2, "sizes": {"hidden_size": 64, "num_heads": 4},
                                     "layer_kinds": 5}, {"answers": {"a": 1}}])
def test_a_wrong_shaped_model_shape_answer_gives_the_formula_shape(tmp_path: Path, answer: Any) -> None:
    from backend.models.shape import FORMULA
    from backend.models.shape_exact import LIBRARIES as SHAPE_LIBRARIES
    from backend.models.shape_exact import QUESTION as SHAPE_QUESTION
    from backend.models.shape_exact import cached_shape, payload

    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    _keep_for(SHAPE_QUESTION, payload(TINY_CONFIG), SHAPE_LIBRARIES, answer)
    shape = cached_shape(tmp_path)
    assert shape.source == FORMULA and shape.num_layers == 2 and shape.hidden_size == 64


def test_a_model_shape_answer_of_its_shape_is_used(tmp_path: Path) -> None:
    from backend.models.shape import EXACT
    from backend.models.shape_exact import LIBRARIES as SHAPE_LIBRARIES
    from backend.models.shape_exact import QUESTION as SHAPE_QUESTION
    from backend.models.shape_exact import cached_shape, payload

    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    good = {"known": True, "num_layers": 2, "parameters": 133568, "sizes": {"hidden_size": 64, "num_heads": 4},
            "layer_kinds": [], "tied_embeddings": True}
    _keep_for(SHAPE_QUESTION, payload(TINY_CONFIG), SHAPE_LIBRARIES, good)
    shape = cached_shape(tmp_path)
    assert shape.source == EXACT and shape.exact_params == 133568


def _data_request(tmp_path: Path) -> Any:
    from backend.data.swift_view import DataRequest

    data = tmp_path / "train.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    return DataRequest(refs=[str(data)], model=str(tmp_path / "model"))


@pytest.mark.parametrize("answer", [{"datasets": 5}, {"datasets": [{"bad_lines": [{"line": "ten"}]}]},
                                    {"datasets": [], "steps_per_epoch": "many"}, {"segments": [{"trained": True}]}])
def test_a_wrong_shaped_data_report_is_not_used(tmp_path: Path, answer: Any) -> None:
    from backend.data.swift_view import LIBRARIES as DATA_LIBRARIES
    from backend.data.swift_view import QUESTION as DATA_QUESTION
    from backend.data.swift_view import cached_report

    request = _data_request(tmp_path)
    _keep_for(DATA_QUESTION, request.payload(mode="report"), DATA_LIBRARIES, answer, tuple(request.inputs()))
    assert cached_report(request) is None


def test_a_data_report_of_its_shape_is_used(tmp_path: Path) -> None:
    from backend.data.swift_view import LIBRARIES as DATA_LIBRARIES
    from backend.data.swift_view import QUESTION as DATA_QUESTION
    from backend.data.swift_view import cached_report

    request = _data_request(tmp_path)
    good = {"datasets": [{"ref": "train.jsonl", "status": "ok", "rows": 1, "bad_lines": [{"line": 3, "reason": "x"}]}],
            "train_rows": 1, "steps_per_epoch": 1}
    _keep_for(DATA_QUESTION, request.payload(mode="report"), DATA_LIBRARIES, good, tuple(request.inputs()))
    assert cached_report(request) == good


@pytest.mark.parametrize("answer", [{"model_types": ["qwen2"], "templates": []}, {"model_types": {}},
                                    {"model_types": {"qwen2": {"architectures": "Qwen2"}}, "templates": []}])
def test_a_wrong_shaped_registry_answer_is_not_used(answer: Any) -> None:
    from backend.models.registry import REGISTRY_LIBRARIES, REGISTRY_QUESTION, load_swift_registry

    _keep_for(REGISTRY_QUESTION, {}, REGISTRY_LIBRARIES, answer)
    assert load_swift_registry() is None


def test_a_registry_answer_of_its_shape_is_used() -> None:
    from backend.models.registry import REGISTRY_LIBRARIES, REGISTRY_QUESTION, load_swift_registry

    good = {"model_types": {"qwen2": {"architectures": ["Qwen2ForCausalLM"], "template": "qwen"}},
            "templates": ["qwen"], "by_name": {"qwen2-7b": ["qwen2", None]}}
    _keep_for(REGISTRY_QUESTION, {}, REGISTRY_LIBRARIES, good)
    assert load_swift_registry() == good
