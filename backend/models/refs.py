"""The one place that resolves model and dataset references.

A model reference (`profile.model.source`, `--model`, the picker's choice) is one of:

* `builtin:tiny-qwen2` - the embedded model, built offline on first use;
* a local folder (absolute, `~`, or relative to the profile's folder);
* `run:<run id>` - the merged model of a workbench run (`workbench merge` makes it);
* a hub id `Org/Name` - looked up in the Hugging Face cache with huggingface_hub's own
  `try_to_load_from_cache` (the snapshot `refs/main` points at, never the newest by mtime),
  then in the ModelScope cache with modelscope's own offline resolver (its `___` folder
  naming and its legacy layouts included); when neither holds it, swift downloads it at launch.

`resolve_model_ref` says what a reference is and where its files are; `resolve_model` /
`resolve_dataset` give what swift takes (an absolute path, or the hub id itself).
The hub libraries are imported only when a hub id is looked up (about half a second, once).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.core.paths import BUILTIN_DATASETS, BUILTIN_PREFIX, is_builtin, looks_local

Origin = Literal["builtin", "local", "hf-cache", "modelscope-cache", "hub", "run"]
RUN_PREFIX = "run:"
# the one hub-id rule (Hugging Face and ModelScope alike): Org/Name in ASCII letters, digits, `_.-`, the
# organisation starting with a letter or digit, no `..` (a path, never an id)
HUB_ID = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")


def is_hub_id(ref: str) -> bool:
    """Whether `ref` is written as a hub id (whether the hub has it is another question)."""
    return HUB_ID.fullmatch(ref) is not None


@dataclass(frozen=True)
class ModelRef:
    """What a model reference names. `path` holds config.json when `found`."""

    ref: str
    origin: Origin
    path: Path | None = None
    hub_id: str | None = None
    problem: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None and (self.path / "config.json").is_file()



# ---------------------------------------------------------------- models


def resolve_model_ref(ref: str, base_dir: Path | None = None, *, build: bool = False) -> ModelRef:
    """Say what `ref` is and where its files are (no weights read, no download)."""
    ref = ref.strip()
    if is_builtin(ref):
        return _builtin(ref, build)
    if ref.startswith(RUN_PREFIX):
        return _run_model(ref)
    path = local_path(ref, base_dir)
    if path.exists() or looks_local(ref):
        if not path.is_dir():
            return ModelRef(ref, "local", problem=f"folder {ref!r} does not exist")
        return ModelRef(ref, "local", path.resolve())
    if not is_hub_id(ref):
        return ModelRef(ref, "hub", problem=f"{ref!r} is neither a folder, builtin:NAME, run:ID nor a hub id "
                                             "Org/Name")
    cached = hf_snapshot(ref)
    if cached is not None:
        return ModelRef(ref, "hf-cache", cached, hub_id=ref)
    cached = modelscope_snapshot(ref)
    if cached is not None:
        return ModelRef(ref, "modelscope-cache", cached, hub_id=ref)
    return ModelRef(ref, "hub", hub_id=ref,
                    problem="hub id not in a local cache: swift downloads it at launch; shape unknown until then")


def resolve_model(ref: str, base_dir: Path | None = None, *, build: bool = False) -> str:
    """What `--model` gets: an absolute local folder, or the hub id itself.

    A built-in model resolves to its cache folder; `build=True` also builds it when missing
    (in a child process, seconds); KeyError for an unknown built-in. `run:ID` resolves to the
    run's merged model. A hub id stays a hub id (swift finds or downloads it; its cached copy is
    only read here for the shape), so the command does not depend on this machine's caches.
    """
    if is_builtin(ref):
        from backend.models.demo.build import builtin_model_path, ensure_builtin_model

        name = ref.removeprefix(BUILTIN_PREFIX)
        return str(ensure_builtin_model(name) if build else builtin_model_path(name))
    if ref.startswith(RUN_PREFIX):
        resolved = _run_model(ref)
        return str(resolved.path) if resolved.path else ref
    candidate = local_path(ref, base_dir)
    if candidate.exists() or looks_local(ref):
        return str(candidate.resolve())
    return ref


def model_config_dir(ref: str, base_dir: Path | None = None) -> Path:
    """The folder holding the model's config.json; LookupError saying why there is none."""
    return config_dir_of(resolve_model_ref(ref, base_dir))


def config_dir_of(resolved: ModelRef) -> Path:
    """The folder holding a resolved model's config.json; LookupError saying why there is none."""
    ref = resolved.ref
    if resolved.found:
        assert resolved.path is not None
        return resolved.path
    if resolved.origin == "builtin" and resolved.problem is None:
        raise LookupError(f"built-in model {ref!r} is not built yet ({resolved.path}); it is built on first launch")
    if resolved.origin == "hub":
        raise LookupError(f"model {ref!r} is a hub id with no local copy of its config.json (neither the Hugging "
                          "Face nor the ModelScope cache holds it); pass a folder holding config.json")
    raise LookupError(resolved.problem or f"{ref!r}: no config.json in {resolved.path}")


def _builtin(ref: str, build: bool) -> ModelRef:
    from backend.models.demo.build import BUILTIN_MODELS, builtin_model_path, ensure_builtin_model

    name = ref.removeprefix(BUILTIN_PREFIX)
    if name not in BUILTIN_MODELS:
        return ModelRef(ref, "builtin", problem=f"unknown built-in model; known: {', '.join(BUILTIN_MODELS)}")
    return ModelRef(ref, "builtin", ensure_builtin_model(name) if build else builtin_model_path(name))


# `run:<id>` -> the run's merged model folder, registered by the lifecycle floor (backend.cli.wiring):
# the resolver sits below the run manager and never imports it. LookupError says why there is none.
RunModelLookup = Callable[[str], Path]
_run_lookup: RunModelLookup | None = None


def register_run_lookup(lookup: RunModelLookup) -> None:
    """Let `run:` references be resolved (the run registry calls this at start-up)."""
    global _run_lookup
    _run_lookup = lookup


def _run_model(ref: str) -> ModelRef:
    """`run:<id>`: the run's merged model (the lookup's message when it has none)."""
    run_id = ref.removeprefix(RUN_PREFIX)
    if _run_lookup is None:
        return ModelRef(ref, "run", problem="run references need the run registry, which this process has not "
                                            "loaded (backend.cli.wiring.install)")
    try:
        return ModelRef(ref, "run", _run_lookup(run_id))
    except LookupError as err:
        return ModelRef(ref, "run", problem=str(err))


def local_path(ref: str, base_dir: Path | None) -> Path:
    path = Path(ref).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    return path


# ---------------------------------------------------------------- the two hub caches


def hf_cache_dir() -> Path:
    """huggingface_hub's cache folder, read from the environment at call time (HF_HUB_CACHE, HF_HOME)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def modelscope_cache_dir() -> Path:
    """modelscope's cache root (MODELSCOPE_CACHE, else ~/.cache/modelscope, as modelscope_hub uses it)."""
    return Path(os.environ.get("MODELSCOPE_CACHE") or "~/.cache/modelscope").expanduser()


def hf_snapshot(hub_id: str, cache_dir: Path | None = None) -> Path | None:
    """The snapshot folder `refs/main` points at, when it holds config.json (huggingface_hub decides)."""
    root = cache_dir or hf_cache_dir()
    if not (root / f"models--{hub_id.replace('/', '--')}").is_dir():
        return None  # not cached: no need to import huggingface_hub
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, "config.json", cache_dir=str(root))
    return Path(found).parent if isinstance(found, str) else None


def modelscope_snapshot(hub_id: str, cache_dir: Path | None = None) -> Path | None:
    """The cached folder modelscope itself resolves offline (`local_files_only`), if it holds config.json."""
    root = cache_dir or modelscope_cache_dir()
    if not root.is_dir():
        return None
    import logging

    logging.getLogger("modelscope_hub").setLevel(logging.WARNING)
    from modelscope_hub import HubApi
    from modelscope_hub.errors import CacheError

    try:
        found = HubApi().download_repo(hub_id, "model", cache_dir=root, local_files_only=True)
    except (CacheError, OSError, ValueError):
        return None
    return Path(found) if (Path(found) / "config.json").is_file() else None


def dataset_cached(hub_id: str) -> bool:
    """Whether a hub dataset has a folder in the Hugging Face cache (`datasets--Org--Name`) or ModelScope's
    (`datasets/Org/Name`, `hub/datasets/Org/Name`): what swift could read without the network."""
    org, _, name = hub_id.partition("/")
    ms = modelscope_cache_dir()
    return any(p.is_dir() for p in (hf_cache_dir() / f"datasets--{org}--{name}", ms / "datasets" / org / name,
                                    ms / "hub" / "datasets" / org / name))


def hf_cached_ids(cache_dir: Path | None = None) -> Iterator[str]:
    """Hub ids with a folder in the Hugging Face cache (`models--Org--Name`, as huggingface_hub names them)."""
    root = cache_dir or hf_cache_dir()
    if not root.is_dir():
        return
    for folder in sorted(root.glob("models--*")):
        yield folder.name.split("--", 1)[1].replace("--", "/")


def modelscope_cached_ids(cache_dir: Path | None = None) -> Iterator[str]:
    """Hub ids in the ModelScope cache, in every layout modelscope reads (dots stored as '___')."""
    root = cache_dir or modelscope_cache_dir()
    seen: set[str] = set()
    for base in (root / "models", root / "hub" / "models", root / "hub", root):
        if not base.is_dir():
            continue
        for folder in sorted(base.glob("*/*")):
            if folder.parent.name in ("models", "datasets", "hub", "._____temp") or folder.name.startswith("."):
                continue
            hub_id = f"{folder.parent.name}/{folder.name}".replace("___", ".")
            if folder.is_dir() and hub_id not in seen:
                seen.add(hub_id)
                yield hub_id
        for folder in sorted(base.glob("*--*")):
            if (folder / "snapshots").is_dir():
                hub_id = folder.name.replace("--", "/", 1).replace("___", ".")
                if hub_id not in seen:
                    seen.add(hub_id)
                    yield hub_id


# ---------------------------------------------------------------- datasets


def resolve_dataset(ref: str, base_dir: Path | None = None) -> str:
    """Turn a dataset reference into what swift takes: an absolute file path or a hub id.

    `builtin:NAME` is a dataset shipped with the workbench; `path#N` keeps swift's sample suffix.
    """
    if is_builtin(ref):
        name = ref.removeprefix(BUILTIN_PREFIX)
        if name not in BUILTIN_DATASETS:
            raise KeyError(f"unknown built-in dataset {ref!r}; known: {', '.join(BUILTIN_DATASETS)}")
        return str(BUILTIN_DATASETS[name])
    path_part, sep, sample = ref.partition("#")
    candidate = local_path(path_part, base_dir)
    if candidate.exists() or looks_local(path_part):
        try:
            resolved = candidate.resolve()
        except (RuntimeError, OSError):  # a symbolic link loop: validate's file check names it
            resolved = candidate.absolute()
        return str(resolved) + (sep + sample)
    return ref


@dataclass(frozen=True)
class DatasetRef:
    """One entry of `data.train`: where it is and how many rows are sampled (`#N`)."""

    ref: str
    kind: str  # "builtin", "local", "hub", "missing"
    path: Path | None
    sample: int | None = None
    problem: str | None = None


DATASET_SUFFIXES = (".jsonl", ".json", ".csv", ".txt")


def dataset_ref(ref: str, base_dir: Path | None = None) -> DatasetRef:
    """What a dataset reference names (inspection calls this: backend/data/first_look.py)."""
    path_part, _, sample_text = ref.partition("#")
    sample = None
    if sample_text:
        if not sample_text.isdigit() or int(sample_text) < 1:
            return DatasetRef(ref, "missing", None, problem=f"'#{sample_text}' is not a row count; use #N, N >= 1")
        sample = int(sample_text)
    if is_builtin(path_part):
        found = BUILTIN_DATASETS.get(path_part.removeprefix(BUILTIN_PREFIX))
        if found is None:
            return DatasetRef(ref, "missing", None, sample, f"unknown built-in dataset; known: "
                              f"{', '.join(BUILTIN_PREFIX + n for n in BUILTIN_DATASETS)}")
        return DatasetRef(ref, "builtin", found, sample)
    path = local_path(path_part, base_dir)
    if path.is_file() or path.is_dir():  # swift reads dataset folders too
        return DatasetRef(ref, "local", path.resolve(), sample)
    if path_part.startswith(("/", "./", "../", "~")) or path.suffix in DATASET_SUFFIXES:
        return DatasetRef(ref, "missing", path, sample, f"file {path_part!r} does not exist")
    return DatasetRef(ref, "hub", None, sample)
