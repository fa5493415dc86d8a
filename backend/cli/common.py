"""Helpers shared by the CLI commands: loading profiles with clean errors, printing."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.core.safe_text import visible_lines
from backend.profile import LaunchProfile, ProfileError, load_profile
from backend.rundir.layout import RunFolder

# soft wrap: a long path or command is printed on one line, so it can be copied as is
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

EXIT_BAD_INPUT = 2


def default_profile_path() -> Path:
    return SHIPPED_PROFILES_DIR / "quickstart.toml"


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """A path, or the name of a shipped profile (`quickstart` -> profiles/quickstart.toml)."""
    path = Path(name_or_path).expanduser()
    if path.exists() or path.suffix == ".toml" or "/" in str(name_or_path):
        return path
    return SHIPPED_PROFILES_DIR / f"{name_or_path}.toml"


def print_error(message: str) -> None:
    """One error line: the text is printed as is (no markup, no wrapping), so keys such as
    `[tuner]` survive and the line greps well."""
    err_console.print("error: " + visible_lines(message), style="red", markup=False, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    print_error(message)
    raise typer.Exit(code)


def find_run_or_exit(ref: str) -> RunFolder:
    """A run by id, unique part of an id, or folder; exit 2 with the reason otherwise."""
    from backend.runs.errors import RunNotFound
    from backend.runs.lookup import find_run

    try:
        return find_run(ref)
    except RunNotFound as err:
        fail(str(err))


def load_or_exit(name_or_path: str | Path) -> tuple[LaunchProfile, Path]:
    path = resolve_profile_path(name_or_path)
    try:
        return load_profile(path), path.resolve()
    except ProfileError as err:
        for problem in err.problems:
            print_error(str(problem))
        raise typer.Exit(EXIT_BAD_INPUT) from None
