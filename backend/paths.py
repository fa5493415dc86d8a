"""Where the workbench keeps things, and how built-in references resolve to real paths.

Profiles may name `builtin:tiny-qwen2` (the embedded model, built offline on first use)
or `builtin:self-cognition` (the dataset shipped in this package), so a shipped profile
works from any directory. Everything else is made absolute before it reaches swift:
swift stores `--model` in args.json and a relative path read later from another
directory is mistaken for a hub id.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

BUILTIN_PREFIX = "builtin:"
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
SHIPPED_PROFILES_DIR = REPO_DIR / "profiles"
BUILTIN_DATASETS = {"self-cognition": PACKAGE_DIR / "demo" / "data" / "self_cognition.jsonl"}


def cache_dir() -> Path:
    """User cache (built models); WORKBENCH_CACHE_DIR overrides it."""
    override = os.environ.get("WORKBENCH_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("finetune-workbench"))


def data_dir() -> Path:
    """User data (the index of runs); WORKBENCH_DATA_DIR overrides it."""
    override = os.environ.get("WORKBENCH_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("finetune-workbench"))


def is_builtin(ref: str) -> bool:
    return ref.startswith(BUILTIN_PREFIX)


def looks_local(ref: str) -> bool:
    """A reference that names a path rather than a hub id."""
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().exists()


def resolve_dataset(ref: str, base_dir: Path | None = None) -> str:
    """Turn a dataset reference into what swift takes: an absolute file path or a hub id."""
    if is_builtin(ref):
        name = ref.removeprefix(BUILTIN_PREFIX)
        if name not in BUILTIN_DATASETS:
            raise KeyError(f"unknown built-in dataset {ref!r}; known: {', '.join(BUILTIN_DATASETS)}")
        return str(BUILTIN_DATASETS[name])
    path_part, sep, sample = ref.partition("#")
    candidate = Path(path_part).expanduser()
    if not candidate.is_absolute() and base_dir is not None and (base_dir / candidate).exists():
        candidate = base_dir / candidate
    if candidate.exists() or looks_local(path_part):
        return str(candidate.resolve()) + (sep + sample)
    return ref


def resolve_model(ref: str, base_dir: Path | None = None, *, build: bool = False) -> str:
    """Model reference -> absolute local path or hub id.

    A built-in model resolves to its cache folder; `build=True` also builds it when missing
    (in a child process, seconds).
    """
    if is_builtin(ref):
        from backend.demo.build import builtin_model_path, ensure_builtin_model

        name = ref.removeprefix(BUILTIN_PREFIX)
        return str(ensure_builtin_model(name) if build else builtin_model_path(name))
    candidate = Path(ref).expanduser()
    if not candidate.is_absolute() and base_dir is not None and (base_dir / candidate).exists():
        candidate = base_dir / candidate
    if candidate.exists() or looks_local(ref):
        return str(candidate.resolve())
    return ref
