"""Which models are at hand, and what each one is, from `config.json` alone (no weights loaded).

Discovery looks in local folders, the Hugging Face and ModelScope caches (found through
backend.models.refs, the one reference resolver) and the embedded tiny models. Each model's shape is
the planner's ModelShape: the exact one from transformers when it was asked before (cached,
milliseconds), else the formula's, labelled; `exact_info` asks transformers (one child process
the first time, so call it off the UI thread).

Whether ms-swift can infer `--model_type` / `--template` is looked up in swift's own answers
(its match of the model name, then of a unique architecture), asked once per ms-swift version
through the oracle (question `swift_registry`, about 15 s of imports in a child) and cached, so
this module never imports swift.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

from backend.core.paths import BUILTIN_PREFIX, BUILTIN_SWIFT_TYPES, is_builtin
from backend.models.refs import Origin
from backend.models.shape import ModelShape, format_count
from backend.models.shape_formula import ConfigError
from backend.oracle.cache import register_shape

__all__ = ["ModelInfo", "ModelShape", "SwiftInference", "describe_source", "discover_models", "exact_info",
           "format_count", "infer_swift_types", "load_swift_registry", "read_model_dir"]
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.gguf")
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".cache", "site-packages"}


# ---------------------------------------------------------------- shape


def shape_of_config(config: dict[str, Any], source: str = "config.json") -> tuple[ModelShape | None, list[str]]:
    """The exact shape when transformers answered before (cache, no child), else the formula's.

    Returns (shape, problems); the shape is None when config.json lacks what the formula needs
    and transformers has not been asked yet (the picker asks it in a worker: `exact_info`).
    """
    from backend.models.shape_exact import cached_answer, shape_from

    try:
        return shape_from(config, cached_answer(config), source), []
    except ConfigError as err:
        return None, [f"{err}; the exact count comes from transformers (asked in the background)"]


# ---------------------------------------------------------------- what a model is


@dataclass
class ModelInfo:
    """One model the user can pick: where it is, its shape, and what swift will make of it."""

    ref: str  # what goes into profile.model.source
    label: str
    origin: Origin
    path: Path | None = None
    shape: ModelShape | None = None
    built: bool = True  # built-in models are built on first launch
    problems: list[str] = field(default_factory=list)

    @property
    def swift_name(self) -> str:
        """The name swift matches against its model groups (see swift.model.get_model_name)."""
        return swift_model_name(str(self.path) if self.path else self.ref)


def read_model_dir(path: Path, *, ref: str | None = None, label: str | None = None,
                   origin: Origin = "local") -> ModelInfo:
    """Describe a model folder from its config.json (no weights are read)."""
    info = ModelInfo(ref=ref or str(path), label=label or path.name, origin=origin, path=path)
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        info.problems.append(f"{config_path} does not exist; a model folder needs config.json")
        return info
    except (OSError, json.JSONDecodeError) as err:
        info.problems.append(f"{config_path} cannot be read: {err}")
        return info
    if not isinstance(config, dict):
        info.problems.append(f"{config_path} is not a JSON object")
        return info
    info.shape, problems = shape_of_config(config, str(config_path))
    info.problems += problems
    return info


def exact_info(info: ModelInfo, progress: Callable[[str], None] | None = None, *,
               cancelled: Callable[[], bool] | None = None) -> ModelInfo:
    """`info` with its shape from transformers itself (one child process the first time, then
    cached). Run it off the UI thread. Unknown architectures keep the formula, labelled estimated.
    Raises OracleCancelled once `cancelled()` is true (the child is stopped)."""
    from backend.models.shape_exact import exact_shape

    if info.path is None or not (info.path / "config.json").is_file():
        return info
    try:
        shape = exact_shape(info.path, progress=progress, cancelled=cancelled)
    except ConfigError as err:
        return replace(info, problems=[*info.problems, str(err)])
    problems = [p for p in info.problems if "comes from transformers" not in p]
    return replace(info, shape=shape, problems=problems)


def builtin_info(name: str) -> ModelInfo:
    """A built-in model: from its built folder, or from its spec when not built yet."""
    from backend.models.demo.build import builtin_model_path

    ref = BUILTIN_PREFIX + name
    path = builtin_model_path(name)
    if (path / "config.json").is_file():
        info = read_model_dir(path, ref=ref, label=ref, origin="builtin")
        return info
    config = builtin_config(name)
    shape, _ = shape_of_config(config, ref)
    # the vocabulary is the trained tokenizer's, known only once built: the count is an upper bound
    note = "not built yet: built offline on first launch (seconds); vocabulary size approximate"
    return ModelInfo(ref=ref, label=ref, origin="builtin", path=path,
                     shape=shape.with_note(note) if shape else None, built=False)


def builtin_config(name: str) -> dict[str, Any]:
    """The config.json a built-in model will have, from the builder's spec (before it is built)."""
    from backend.models.demo.build import BUILTIN_MODELS

    spec = BUILTIN_MODELS[name]
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size, "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_key_value_heads,
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }


def describe_source(source: str, base_dir: Path | None = None) -> ModelInfo:
    """What `profile.model.source` names: a built-in, a local folder, a cached or a hub model."""
    from backend.models.refs import resolve_model_ref

    if is_builtin(source):
        from backend.models.demo.build import BUILTIN_MODELS

        name = source.removeprefix(BUILTIN_PREFIX)
        if name not in BUILTIN_MODELS:
            return ModelInfo(ref=source, label=source, origin="builtin", built=False,
                             problems=[f"unknown built-in model; known: {', '.join(BUILTIN_MODELS)}"])
        return builtin_info(name)
    resolved = resolve_model_ref(source, base_dir)
    if resolved.path is not None and resolved.path.is_dir():
        return read_model_dir(resolved.path, ref=source, label=source, origin=resolved.origin)
    return ModelInfo(ref=source, label=source, origin=resolved.origin,
                     problems=[resolved.problem or f"{source!r} cannot be found"])


# ---------------------------------------------------------------- discovery


def scan_hf_cache(root: Path | None = None) -> Iterator[ModelInfo]:
    """Every model of the Hugging Face cache, at the snapshot `refs/main` points at (huggingface_hub)."""
    from backend.models.refs import hf_cached_ids, hf_snapshot

    for hub_id in hf_cached_ids(root):
        snapshot = hf_snapshot(hub_id, root)
        if snapshot is not None:
            # a local path: a bare hub id would make swift download from ModelScope (its default hub)
            yield read_model_dir(snapshot, ref=str(snapshot), label=f"{hub_id} (HF cache)", origin="hf-cache")


def scan_modelscope_cache(root: Path | None = None) -> Iterator[ModelInfo]:
    """Every model of the ModelScope cache, at the folder modelscope itself resolves offline."""
    from backend.models.refs import modelscope_cached_ids, modelscope_snapshot

    for hub_id in modelscope_cached_ids(root):
        folder = modelscope_snapshot(hub_id, root)
        if folder is not None:
            yield read_model_dir(folder, ref=str(folder), label=f"{hub_id} (ModelScope cache)",
                                 origin="modelscope-cache")


def scan_local(roots: Iterable[Path], max_depth: int = 2) -> Iterator[ModelInfo]:
    """Folders under `roots` (up to `max_depth` deep) holding config.json and weights."""
    seen: set[Path] = set()
    for root in roots:
        for folder in _walk_dirs(root.expanduser(), max_depth):
            resolved = folder.resolve()
            if resolved in seen or not is_model_dir(folder):
                continue
            seen.add(resolved)
            yield read_model_dir(resolved, ref=str(resolved), label=_short(resolved), origin="local")


def _walk_dirs(root: Path, max_depth: int) -> Iterator[Path]:
    if not root.is_dir():
        return
    yield root
    if max_depth == 0:
        return
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and p.name not in SKIP_DIRS
                          and not p.name.startswith("."))
    except OSError:
        return
    for child in children:
        yield from _walk_dirs(child, max_depth - 1)


def is_model_dir(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(
        next(folder.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS
    )


def _short(path: Path) -> str:
    try:
        return "./" + str(path.relative_to(Path.cwd()))
    except ValueError:
        home = Path.home()
        return "~/" + str(path.relative_to(home)) if path.is_relative_to(home) else str(path)


def discover_models(local_roots: Iterable[Path] = ()) -> list[ModelInfo]:
    """Every model at hand: built-ins first, then local folders, then the two hub caches."""
    from backend.models.demo.build import BUILTIN_MODELS

    found = [builtin_info(name) for name in BUILTIN_MODELS]
    builtin_dirs = {info.path.resolve() for info in found if info.path and info.path.exists()}
    found += [m for m in scan_local(local_roots) if m.path not in builtin_dirs]
    found += list(scan_hf_cache())
    found += list(scan_modelscope_cache())
    return found


# ---------------------------------------------------------------- swift's model_type / template


def swift_model_name(model_id_or_path: str) -> str:
    """The name swift matches (a port of swift.model.model_meta.get_model_name)."""
    text = model_id_or_path.rstrip("/")
    match = re.search(r"/models--(?:.+?--)?(.+?)/snapshots/", text) or re.search(
        r"/models/(?:.+?--)?(.+?)/snapshots/", text
    )
    if match:
        return match.group(1)
    return text.rsplit("/", 1)[-1].replace("___", ".")


def swift_version() -> str | None:
    try:
        return metadata.version("ms-swift")
    except metadata.PackageNotFoundError:
        return None


REGISTRY_QUESTION = "swift_registry"  # backend/oracle/swift_registry.py
REGISTRY_LIBRARIES = ("ms-swift",)


class ModelTypeShape(msgspec.Struct):
    architectures: list[str] = []
    template: str | None = None
    candidate_templates: list[str] = []


class RegistryShape(msgspec.Struct):
    """What infer_swift_types and the pickers read of the registry answer: a kept answer of another
    shape is asked again (backend/oracle/cache.py), never indexed into."""

    model_types: dict[str, ModelTypeShape]
    templates: list[str]
    swift_version: str = "unknown"
    by_name: dict[str, list[str | None]] = {}
    by_architecture: dict[str, list[str]] = {}


register_shape(REGISTRY_QUESTION, lambda answer: msgspec.convert(answer, RegistryShape))


def load_swift_registry() -> dict[str, Any] | None:
    """The cached answer on swift's registry, or None when not asked yet (never starts a child)."""
    from backend.oracle import cached

    return cached(REGISTRY_QUESTION, {}, libraries=REGISTRY_LIBRARIES)


def build_swift_registry(timeout: float = 180.0, *, cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Ask swift's registry in a child (about 15 s of imports; cached per ms-swift version and question
    code). Raises OracleError (a RuntimeError) when the child fails, OracleCancelled when `cancelled`."""
    from backend.oracle import ask

    return ask(REGISTRY_QUESTION, {}, libraries=REGISTRY_LIBRARIES, timeout=timeout, cancelled=cancelled)


@dataclass(frozen=True)
class SwiftInference:
    """What swift will use as model_type and template, and whether the user must choose."""

    model_type: str | None
    template: str | None
    how: str  # "profile", "builtin", "name", "architecture", "args.json", "unknown"
    model_type_choices: tuple[str, ...] = ()
    template_choices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def needs_choice(self) -> bool:
        return self.model_type is None or self.template is None


def infer_swift_types(info: ModelInfo, registry: dict[str, Any] | None, *, model_type: str | None = None,
                      template: str | None = None) -> SwiftInference:
    """swift's own inference, looked up in its registry's answers: explicit values, then args.json, then
    swift's match of the model name, then a unique architecture match (swift's); the template from the
    matched group or model type."""
    if info.origin == "builtin":
        return SwiftInference(model_type or BUILTIN_SWIFT_TYPES[0], template or BUILTIN_SWIFT_TYPES[1], "builtin")
    saved = _read_args_json(info.path)
    model_type = model_type or saved.get("model_type")
    template = template or saved.get("template")
    if model_type and template:
        return SwiftInference(model_type, template, "profile" if not saved else "args.json")
    if registry is None:
        return SwiftInference(model_type, template, "unknown",
                              warnings=("ms-swift's model registry has not been read yet",))
    types = registry["model_types"]
    how = "profile"
    group_template = None
    if model_type is None:
        found = registry.get("by_name", {}).get(info.swift_name.lower())  # swift's get_matched_model_meta
        if found is not None:
            model_type, group_template, how = found[0], found[1], "name"
    type_choices: tuple[str, ...] = ()
    if model_type is None:
        arch = info.shape.architecture if info.shape else None
        matches = tuple(registry.get("by_architecture", {}).get(arch, ())) if arch else ()  # get_matched_model_types
        if len(matches) == 1:
            model_type, how = matches[0], "architecture"
        else:
            type_choices = matches
    warnings = []
    if model_type is not None and model_type not in types:
        warnings.append(f"model_type {model_type!r} is not one ms-swift {registry.get('swift_version')} knows")
    meta = types.get(model_type or "", {})
    template_choices: tuple[str, ...] = ()
    if template is None and model_type is not None:
        template = group_template or meta.get("template")
        if template is None:
            candidates = tuple(meta.get("candidate_templates", ()))
            if len(candidates) == 1:
                template = candidates[0]
            else:
                template_choices = candidates
    if template is not None and template not in registry.get("templates", [template]):
        warnings.append(f"template {template!r} is not one ms-swift knows")
    if model_type is None:
        arch = info.shape.architecture if info.shape else "an unknown architecture"
        if type_choices:
            warnings.append(f"swift cannot infer model_type: {arch} matches {len(type_choices)} types; choose one")
        else:
            warnings.append(f"swift cannot infer model_type for {arch}; set model_type (and template)")
    elif template is None:
        warnings.append(f"swift cannot infer the template of {model_type}; choose one")
    return SwiftInference(model_type, template, how if model_type else "unknown", type_choices,
                          template_choices, tuple(warnings))


def _read_args_json(path: Path | None) -> dict[str, Any]:
    if path is None or not (path / "args.json").is_file():
        return {}
    try:
        data = json.loads((path / "args.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return {k: data[k] for k in ("model_type", "template") if isinstance(data.get(k), str)}
