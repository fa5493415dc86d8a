"""The validation rule that needs the run folders' ownership: output_dir must be empty, new, or
(on resume) the run's own, since swift's rotation deletes the checkpoint folders it finds there (#14).

Registered with backend.launch.validate by backend.cli.wiring (validate sits a floor below)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from backend.launch.validate import PathRule, Problem
from backend.profile import LaunchProfile
from backend.runs.outputs import output_dir_problem


def _output_dir_free(profile: LaunchProfile, base_dir: Path | None) -> Iterator[Problem]:
    if not profile.output.output_dir:
        return
    path = Path(profile.output.output_dir).expanduser()
    problem = output_dir_problem(path if path.is_absolute() else (base_dir or Path.cwd()) / path)
    if problem:
        yield Problem("output.output_dir", "error", problem,
                      "Choose an empty or new folder, or leave output_dir empty to write inside the run folder.")


RUN_PATH_RULES: tuple[PathRule, ...] = (_output_dir_free,)
