"""One launch's references, resolved once: the profile's model and datasets, as `backend.models.refs` reads them.

`resolve_profile` is called at the top of a launch (`backend.runs.start.start_run`) and of each public entry
that stands alone (validate, the command builder, swift's dataset report); what it returns is passed down, so
validation, swift's report on the data and the command name the same folders and files even when one moves
between them. Nothing here reads weights or starts a child, except `build_model` (the built-in model).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.paths import BUILTIN_DATASETS, BUILTIN_PREFIX, is_builtin
from backend.models import refs


@dataclass(frozen=True)
class ResolvedDataset:
    """One entry of `data.train` / `data.val`."""

    field: str  # "data.train" or "data.val"
    ref: str  # as the profile writes it
    found: refs.DatasetRef  # what it names (kind, path, `#N`)
    swift: str | None  # what swift gets: an absolute path (+ `#N`) or a hub id; None: an unknown built-in
    local: Path | None  # the file a local reference names (absolute, whether it exists or not); None: built-in

    def for_swift(self) -> str:
        """What `--dataset` gets; KeyError for an unknown built-in dataset."""
        if self.swift is None:
            raise KeyError(f"unknown built-in dataset {self.ref!r}; known: {', '.join(BUILTIN_DATASETS)}")
        return self.swift


@dataclass(frozen=True)
class ResolvedProfile:
    """The profile's model and datasets, resolved against `base_dir` (the profile's folder)."""

    source: str  # profile.model.source
    base_dir: Path | None
    model: refs.ModelRef
    train: tuple[ResolvedDataset, ...]
    val: tuple[ResolvedDataset, ...]

    @property
    def model_arg(self) -> str:
        """What `--model` gets: an absolute local folder, or the hub id itself (swift finds or downloads it);
        KeyError for an unknown built-in model."""
        found = self.model
        if found.origin == "builtin":
            if found.path is None:
                raise KeyError(found.problem or f"unknown built-in model {self.source!r}")
            return str(found.path)
        if found.origin == "run":
            return str(found.path) if found.path else self.source
        if found.origin == "local":
            return str(found.path or refs.local_path(self.source, self.base_dir).resolve())
        return found.hub_id or self.source  # a hub id stays a hub id, cached or not

    def config_dir(self) -> Path:
        """The folder holding the model's config.json; LookupError saying why there is none."""
        return refs.config_dir_of(self.model)

    def datasets(self) -> Iterator[ResolvedDataset]:
        yield from self.train
        yield from self.val

    def build_model(self) -> None:
        """Build the built-in model when it is not built yet (a child, seconds): its folder stays the one
        resolved."""
        if self.model.origin == "builtin" and self.model.path is not None:
            from backend.models.demo.build import ensure_builtin_model

            ensure_builtin_model(self.source.removeprefix(BUILTIN_PREFIX))


def resolve_profile(profile: Any, base_dir: Path | None = None) -> ResolvedProfile:
    """The profile's model and datasets resolved once (no weights read, nothing built or downloaded)."""
    train, val = resolve_datasets(profile.data, base_dir)
    source = profile.model.source
    return ResolvedProfile(source, base_dir, refs.resolve_model_ref(source, base_dir), train, val)


def resolve_datasets(
    data: Any, base_dir: Path | None
) -> tuple[tuple[ResolvedDataset, ...], tuple[ResolvedDataset, ...]]:
    """(train, val) of a profile's `[data]` section."""
    train = tuple(_dataset("data.train", ref, base_dir) for ref in data.train)
    val = tuple(_dataset("data.val", ref, base_dir) for ref in data.val)
    return train, val


def _dataset(field: str, ref: str, base_dir: Path | None) -> ResolvedDataset:
    path_part = ref.partition("#")[0]
    local = None if is_builtin(ref) or not path_part else refs.local_path(path_part, base_dir).absolute()
    try:
        swift: str | None = refs.resolve_dataset(ref, base_dir)
    except KeyError:
        swift = None
    return ResolvedDataset(field, ref, refs.dataset_ref(ref, base_dir), swift, local)
