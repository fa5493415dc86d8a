"""Merged models as models: the folders merges made, found through a run's finished merge jobs and its
merged/ folder, each read from the record a merge writes beside the weights (MODEL_RECORD)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from backend.jobs.job import list_jobs
from backend.rundir.layout import RunFolder

MERGED_DIR_NAME = "merged"
MODEL_RECORD = "workbench_model.json"  # written by a merge beside the merged weights


@dataclass
class MergedModel:
    """A merged model folder and where it came from."""

    path: Path
    run_id: str
    run_dir: Path
    checkpoint: str
    step: int
    base_model: str | None
    model_type: str | None
    template: str | None
    torch_dtype: str | None
    quantization: str | None
    created_at: float

    def describe(self) -> str:
        made = datetime.fromtimestamp(self.created_at).strftime("%Y-%m-%d %H:%M")
        return f"{self.path}  ({self.run_id} checkpoint-{self.step}, merged {made})"


def read_merged_model(folder: Path) -> MergedModel | None:
    """The record of a merged model folder, or None when the folder is not one."""
    try:
        record = json.loads((folder / MODEL_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (folder / "config.json").is_file():
        return None
    return MergedModel(
        path=folder.resolve(), run_id=record.get("run_id", "?"), run_dir=Path(record.get("run_dir", "")),
        checkpoint=record.get("checkpoint", ""), step=int(record.get("step", -1)),
        base_model=record.get("base_model"), model_type=record.get("model_type"), template=record.get("template"),
        torch_dtype=record.get("torch_dtype"), quantization=record.get("quantization"),
        created_at=float(record.get("created_at", 0.0)),
    )


def merged_models(run_dirs: Iterable[Path] | None = None) -> list[MergedModel]:
    """Every merged model of the given runs (all known runs by default), newest first.

    Found through the runs' finished merge jobs (so a model merged to --output elsewhere is
    listed) and the runs' merged/ folders (so one whose job folder was removed is too)."""
    if run_dirs is None:
        from backend.rundir import index

        run_dirs = index.known_folders()
    found: dict[Path, MergedModel] = {}
    for run_dir in run_dirs:
        run = RunFolder(run_dir)
        candidates = [Path(job.read_spec().output) for job in list_jobs(run.jobs_dir, kind="merge")
                      if job.read_state().status == "finished"]
        merged_dir = run.path / MERGED_DIR_NAME
        if merged_dir.is_dir():
            candidates += [p for p in merged_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
        for folder in candidates:
            model = read_merged_model(folder)
            if model is not None:
                found[model.path] = model
    return sorted(found.values(), key=lambda m: m.created_at, reverse=True)
