"""Question `swift_registry`: what ms-swift's model and template registries hold (child side).

`{}` -> `{"swift_version", "model_types": {type: {"architectures", "template", "candidate_templates",
"groups": [{"names", "template"}]}}, "templates": [...]}`: what `backend.models.infer_swift_types`
needs to infer `--model_type` / `--template` the way swift does, without importing swift.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("importing ms-swift's model registry")
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    model_types = {model_type: _model_type(meta) for model_type, meta in MODEL_MAPPING.items()}
    return {"swift_version": metadata.version("ms-swift"), "model_types": model_types,
            "templates": sorted(TEMPLATE_MAPPING)}


def _model_type(meta: Any) -> dict[str, Any]:
    groups = []
    for group in meta.model_groups:
        names = set()
        for model in group.models:
            for key in ("ms_model_id", "hf_model_id", "model_path"):
                value = getattr(model, key)
                if isinstance(value, str):
                    names.add(value.rsplit("/", 1)[-1].lower())
        groups.append({"names": sorted(names), "template": group.template})
    return {
        "architectures": [a for a in meta.architectures if a != "null"],
        "template": meta.template,
        "candidate_templates": list(meta.candidate_templates),
        "groups": groups,
    }
