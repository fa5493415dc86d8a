"""Where the workbench keeps things (references are resolved by backend.models.refs, the one resolver,
one floor up: this module is ground and imports nothing of the project).

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
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # backend/
REPO_DIR = PACKAGE_DIR.parent
SHIPPED_PROFILES_DIR = REPO_DIR / "profiles"
BUILTIN_DATASETS = {"self-cognition": PACKAGE_DIR / "models" / "demo" / "data" / "self_cognition.jsonl"}
# (model_type, template) swift must be told for the built-in models: it cannot infer them from a local folder
BUILTIN_SWIFT_TYPES = ("qwen2", "qwen")


def cache_dir() -> Path:
    """User cache (built models); WORKBENCH_CACHE_DIR overrides it."""
    override = os.environ.get("WORKBENCH_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("finetune-workbench"))


def data_dir() -> Path:
    """User data (the index of runs); WORKBENCH_DATA_DIR overrides it."""
    override = os.environ.get("WORKBENCH_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("finetune-workbench"))


def workspace_dir() -> Path:
    """Where new run folders go; WORKBENCH_WORKSPACE chooses another place."""
    override = os.environ.get("WORKBENCH_WORKSPACE")
    return Path(override).expanduser().resolve() if override else data_dir() / "runs"


def is_builtin(ref: str) -> bool:
    return ref.startswith(BUILTIN_PREFIX)


def looks_local(ref: str) -> bool:
    """A reference that names a path rather than a hub id."""
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().exists()

