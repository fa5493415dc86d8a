"""Which models are at hand, and what each one is, from `config.json` alone (no weights loaded).

Discovery looks in local folders, the Hugging Face cache (`~/.cache/huggingface/hub`), the
ModelScope cache (`~/.cache/modelscope/hub`) and the embedded tiny models. For each model
the shape (architecture, layers, hidden size, heads, vocab, context) and the parameter
count are computed from the config, so a 70B model is described in a millisecond.

Whether ms-swift can infer `--model_type` / `--template` is answered the way swift does it
(model name first, then a unique architecture match) from a dump of swift's registry. The
dump is made once per ms-swift version in a child process (`python -m backend.models
--dump-swift-registry`, about 15 s of imports) and cached, so this module never imports swift.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from backend.estimate.shape import ConfigError
from backend.estimate.shape import ModelShape as PlannerShape
from backend.paths import BUILTIN_PREFIX, REPO_DIR, cache_dir, is_builtin

Origin = Literal["builtin", "local", "hf-cache", "modelscope-cache", "hub"]
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.gguf")
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".cache", "site-packages"}

# The built-in models are Qwen2 with a ChatML tokenizer: swift needs these two named.
BUILTIN_SWIFT_TYPES = ("qwen2", "qwen")


# ---------------------------------------------------------------- shape from config.json


@dataclass(frozen=True)
class ModelShape:
    """What config.json says about a decoder-only model."""

    model_type: str | None
    architecture: str | None
    layers: int | None
    hidden_size: int | None
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    vocab_size: int | None
    context_length: int | None
    tied_embeddings: bool
    num_experts: int | None = None
    parameters: int | None = None
    parameters_exact: bool = False
    notes: tuple[str, ...] = ()

    def describe(self) -> list[tuple[str, str]]:
        """(label, value) rows for display."""
        kv = f" ({self.kv_heads} key/value)" if self.kv_heads and self.kv_heads != self.heads else ""
        experts = [("experts", str(self.num_experts))] if self.num_experts else []
        return [
            ("architecture", self.architecture or self.model_type or "?"),
            ("layers", _or_q(self.layers)),
            ("hidden size", _or_q(self.hidden_size)),
            ("heads", _or_q(self.heads) + kv),
            ("vocab", _or_q(self.vocab_size)),
            ("context", _or_q(self.context_length)),
            *experts,
            ("parameters", format_count(self.parameters, exact=self.parameters_exact)),
        ]


def _or_q(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def format_count(count: int | None, *, exact: bool = True) -> str:
    """1234567 -> '1.23 M (1,234,567)'; approximate counts get a leading '≈'."""
    if count is None:
        return "?"
    prefix = "" if exact else "≈ "
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{prefix}{count / size:.3g} {unit} ({count:,})"
    return f"{prefix}{count:,}"


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's keys under `text_config` / `llm_config`."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, dict) and "hidden_size" in nested:
            return {**nested, "architectures": config.get("architectures"), "_outer_type": config.get("model_type")}
    return config


def shape_from_config(config: dict[str, Any]) -> ModelShape:
    cfg = text_config(config)
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads", "multi_query_group_num") or heads
    head_dim = _int(cfg, "head_dim") or (hidden // heads if hidden and heads else None)
    context = _int(cfg, "max_position_embeddings", "n_positions", "seq_length", "max_sequence_length")
    architectures = config.get("architectures") or []
    shape = ModelShape(
        model_type=cfg.get("_outer_type") or cfg.get("model_type"),
        architecture=architectures[0] if architectures else None,
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_int(cfg, "intermediate_size", "n_inner", "ffn_hidden_size"),
        vocab_size=_int(cfg, "vocab_size", "padded_vocab_size"),
        context_length=context,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=_int(cfg, "num_local_experts", "num_experts", "n_routed_experts"),
    )
    count, exact, notes = count_parameters(cfg, shape)
    return ModelShape(**{**shape.__dict__, "parameters": count, "parameters_exact": exact, "notes": notes})


def _int(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


KNOWN_DENSE_FAMILIES = {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "phi3", "internlm2", "yi", "olmo2"}


def count_parameters(cfg: dict[str, Any], shape: ModelShape) -> tuple[int | None, bool, tuple[str, ...]]:
    """Parameters from config.json alone: returns (count, exact, notes).

    Dense decoders are counted by the memory planner's shape model (one formula for the whole
    workbench); `exact` is True for the families whose layout it knows (the count then equals
    the weights' element count). Mixture-of-experts models, which the planner refuses, get an
    estimate with a Llama-style layout.
    """
    h, n_layers, vocab = shape.hidden_size, shape.layers, shape.vocab_size
    if not (h and n_layers and vocab and shape.heads and shape.head_dim):
        return None, False, ("config.json lacks the sizes needed to count parameters",)
    family = str(cfg.get("model_type") or "")
    if not shape.num_experts:
        try:
            total = PlannerShape.from_config_dict(cfg).total_params
        except ConfigError as err:
            return None, False, (str(err),)
        exact = family in KNOWN_DENSE_FAMILIES
        notes = () if exact else (f"parameter count assumes a Llama-style layout for model_type {family!r}",)
        return total, exact, notes
    return _moe_parameters(cfg, shape), False, (f"mixture of experts ({family!r}): parameter count estimated",)


def _moe_parameters(cfg: dict[str, Any], shape: ModelShape) -> int:
    h, vocab = shape.hidden_size or 0, shape.vocab_size or 0
    head_dim, heads = shape.head_dim or 0, shape.heads or 0
    q_width, kv_width = heads * head_dim, (shape.kv_heads or heads) * head_dim
    attention = 2 * h * q_width + 2 * h * kv_width
    experts = shape.num_experts or 0
    expert_inter = _int(cfg, "moe_intermediate_size") or shape.intermediate_size or 4 * h
    mlp = experts * 3 * h * expert_inter + h * experts  # experts + router
    shared = _int(cfg, "shared_expert_intermediate_size")
    if shared:
        mlp += 3 * h * shared + h  # shared expert + its gate
    total = (shape.layers or 0) * (attention + mlp + 2 * h) + vocab * h + h
    return total if shape.tied_embeddings else total + vocab * h


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
    info.shape = shape_from_config(config)
    return info


def builtin_info(name: str) -> ModelInfo:
    """A built-in model: from its built folder, or from its spec when not built yet."""
    from backend.demo.build import BUILTIN_MODELS, builtin_model_path

    ref = BUILTIN_PREFIX + name
    path = builtin_model_path(name)
    if (path / "config.json").is_file():
        info = read_model_dir(path, ref=ref, label=ref, origin="builtin")
        return info
    spec = BUILTIN_MODELS[name]
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size, "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_key_value_heads,
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": True,
    }
    shape = shape_from_config(config)
    # the vocabulary is the trained tokenizer's, known only once built: the count is an upper bound
    shape = ModelShape(**{**shape.__dict__, "parameters_exact": False,
                          "notes": ("not built yet: built offline on first launch (seconds)",)})
    return ModelInfo(ref=ref, label=ref, origin="builtin", path=path, shape=shape, built=False)


def describe_source(source: str, base_dir: Path | None = None) -> ModelInfo:
    """What `profile.model.source` names: a built-in, a local folder, a cached or a hub model."""
    if is_builtin(source):
        from backend.demo.build import BUILTIN_MODELS

        name = source.removeprefix(BUILTIN_PREFIX)
        if name not in BUILTIN_MODELS:
            return ModelInfo(ref=source, label=source, origin="builtin", built=False,
                             problems=[f"unknown built-in model; known: {', '.join(BUILTIN_MODELS)}"])
        return builtin_info(name)
    path = Path(source).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if path.is_dir():
        return read_model_dir(path.resolve(), ref=source, label=source)
    if source.startswith(("/", "./", "../", "~")):
        return ModelInfo(ref=source, label=source, origin="local",
                         problems=[f"folder {source!r} does not exist"])
    cached = find_cached(source)
    if cached is not None:
        info = read_model_dir(cached.path, ref=source, label=source, origin=cached.origin)  # type: ignore[arg-type]
        return info
    return ModelInfo(ref=source, label=source, origin="hub",
                     problems=["hub id not in a local cache: swift downloads it at launch; shape unknown until then"])


# ---------------------------------------------------------------- discovery


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()
    return home / "hub"


def modelscope_cache_dir() -> Path:
    root = Path(os.environ.get("MODELSCOPE_CACHE", "~/.cache/modelscope/hub")).expanduser()
    return root


def scan_hf_cache(root: Path | None = None) -> Iterator[ModelInfo]:
    """`models--Org--Name/snapshots/<rev>/config.json`; the newest snapshot of each model."""
    root = root or hf_cache_dir()
    if not root.is_dir():
        return
    for repo in sorted(root.glob("models--*")):
        snapshots = [s for s in (repo / "snapshots").glob("*") if (s / "config.json").is_file()]
        if not snapshots:
            continue
        newest = max(snapshots, key=lambda s: s.stat().st_mtime)
        hub_id = repo.name.removeprefix("models--").replace("--", "/")
        # a local path: a bare hub id would make swift download from ModelScope (its default hub)
        yield read_model_dir(newest, ref=str(newest), label=f"{hub_id} (HF cache)", origin="hf-cache")


def scan_modelscope_cache(root: Path | None = None) -> Iterator[ModelInfo]:
    """`[models/]Org/Name/config.json`; ModelScope stores dots in names as '___'."""
    root = root or modelscope_cache_dir()
    if not root.is_dir():
        return
    for base in (root / "models", root):
        if not base.is_dir():
            continue
        for config in sorted(base.glob("*/*/config.json")):
            folder = config.parent
            if folder.parent.name in ("models", "datasets", "._____temp"):
                continue
            hub_id = f"{folder.parent.name}/{folder.name}".replace("___", ".")
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
    from backend.demo.build import BUILTIN_MODELS

    found = [builtin_info(name) for name in BUILTIN_MODELS]
    builtin_dirs = {info.path.resolve() for info in found if info.path and info.path.exists()}
    found += [m for m in scan_local(local_roots) if m.path not in builtin_dirs]
    found += list(scan_hf_cache())
    found += list(scan_modelscope_cache())
    return found


@dataclass(frozen=True)
class _Cached:
    path: Path
    origin: str


def find_cached(hub_id: str) -> _Cached | None:
    """The local copy of `Org/Name` in the HF or ModelScope cache, if there is one."""
    if hub_id.count("/") != 1:
        return None
    org, name = hub_id.split("/")
    snapshots = hf_cache_dir() / f"models--{org}--{name}" / "snapshots"
    candidates = [s for s in snapshots.glob("*") if (s / "config.json").is_file()] if snapshots.is_dir() else []
    if candidates:
        return _Cached(max(candidates, key=lambda s: s.stat().st_mtime), "hf-cache")
    ms_name = name.replace(".", "___")
    for base in (modelscope_cache_dir() / "models", modelscope_cache_dir()):
        folder = base / org / ms_name
        if (folder / "config.json").is_file():
            return _Cached(folder, "modelscope-cache")
    return None


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


def registry_path() -> Path:
    return cache_dir() / f"swift-registry-{swift_version() or 'none'}.json"


def load_swift_registry() -> dict[str, Any] | None:
    """The cached dump of swift's model registry, or None when not made yet."""
    try:
        return json.loads(registry_path().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def build_swift_registry(timeout: float = 180.0) -> dict[str, Any]:
    """Dump swift's registry in a child process (about 15 s of imports), cache and return it."""
    target = registry_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "backend.models", "--dump-swift-registry", str(target)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=str(REPO_DIR),
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise RuntimeError(f"reading ms-swift's model registry failed:\n{done.stderr[-2000:]}")
    registry = load_swift_registry()
    if registry is None:
        raise RuntimeError(f"ms-swift's model registry dump {target} is missing or unreadable")
    return registry


def _dump_swift_registry(target: Path) -> None:
    """Runs in the child process: import swift and write what inference needs as JSON."""
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    from backend.profile import write_text_atomic

    model_types: dict[str, Any] = {}
    for model_type, meta in MODEL_MAPPING.items():
        groups = []
        for group in meta.model_groups:
            names = set()
            for model in group.models:
                for key in ("ms_model_id", "hf_model_id", "model_path"):
                    value = getattr(model, key)
                    if isinstance(value, str):
                        names.add(value.rsplit("/", 1)[-1].lower())
            groups.append({"names": sorted(names), "template": group.template})
        model_types[model_type] = {
            "architectures": [a for a in meta.architectures if a != "null"],
            "template": meta.template,
            "candidate_templates": list(meta.candidate_templates),
            "groups": groups,
        }
    data = {"swift_version": swift_version(), "model_types": model_types, "templates": sorted(TEMPLATE_MAPPING)}
    write_text_atomic(target, json.dumps(data))


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
    """Mirror swift's own inference: explicit values, then args.json, then the model name, then
    a unique architecture match; the template from the matched group or model type."""
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
    name = info.swift_name.lower()
    how = "profile"
    group_template = None
    if model_type is None:
        for candidate, meta in types.items():
            group = next((g for g in meta["groups"] if name in g["names"]), None)
            if group is not None:
                model_type, group_template, how = candidate, group["template"], "name"
                break
    type_choices: tuple[str, ...] = ()
    if model_type is None:
        arch = info.shape.architecture if info.shape else None
        matches = tuple(t for t, meta in types.items() if arch and arch in meta["architectures"])
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Model discovery helpers (child-process entry points).")
    parser.add_argument("--dump-swift-registry", type=Path, metavar="JSON")
    args = parser.parse_args(argv)
    if args.dump_swift_registry:
        _dump_swift_registry(args.dump_swift_registry)


if __name__ == "__main__":
    main()
