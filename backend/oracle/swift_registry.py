"""Question `swift_registry`: what ms-swift's model and template registries hold, and what swift itself
infers from a model's name or architecture (child side).

`{}` -> `{"swift_version", "model_types": {type: {"architectures", "template", "candidate_templates"}},
"templates": [...], "by_name": {name: [model_type, template]}, "by_architecture": {arch: [types]}}`.
`by_name` is swift's own `get_matched_model_meta` for every model name its groups list (the group's
template merged in, first match wins as in swift), `by_architecture` its own `get_matched_model_types`:
`backend.models.registry.infer_swift_types` looks a model up in them, without importing swift.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

NAME_KEYS = ("ms_model_id", "hf_model_id", "model_path")


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("importing ms-swift's model registry")
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    model_types = {model_type: _model_type(meta) for model_type, meta in MODEL_MAPPING.items()}
    progress("asking ms-swift how it matches each model name")
    return {"swift_version": metadata.version("ms-swift"), "model_types": model_types,
            "templates": sorted(TEMPLATE_MAPPING), "by_name": _by_name(MODEL_MAPPING),
            "by_architecture": _by_architecture(model_types)}


def _model_type(meta: Any) -> dict[str, Any]:
    return {
        "architectures": [a for a in meta.architectures if a != "null"],
        "template": meta.template,
        "candidate_templates": list(meta.candidate_templates),
    }


def _by_name(mapping: dict[str, Any]) -> dict[str, list[str | None]]:
    from swift.model.model_meta import get_matched_model_meta

    names = {value.rsplit("/", 1)[-1].lower() for meta in mapping.values() for group in meta.model_groups
             for model in group.models for value in (getattr(model, key) for key in NAME_KEYS)
             if isinstance(value, str)}
    found = {}
    for name in sorted(names):
        meta = get_matched_model_meta(name)
        if meta is not None:
            found[name] = [meta.model_type, meta.template]
    return found


def _by_architecture(model_types: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    from swift.model.model_meta import get_matched_model_types

    architectures = {arch for meta in model_types.values() for arch in meta["architectures"]}
    return {arch: list(get_matched_model_types([arch])) for arch in sorted(architectures)}
