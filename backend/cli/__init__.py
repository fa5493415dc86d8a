"""The `workbench` command: with no sub-command it opens the TUI; the rest run headless.

Opening the TUI is the hot path: it imports neither Typer nor any sub-command module, so
the first frame comes as fast as Textual allows. Everything else goes through the Typer
app in `backend/cli/app.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer


def full_app() -> typer.Typer:
    """The Typer app with every sub-command registered; tests drive this one."""
    from backend.cli.app import full_app as build

    return build()


def _tui_profile(args: list[str]) -> Path | None | bool:
    """The profile to open when the command line only asks for the TUI; False otherwise."""
    if not args:
        return None
    if len(args) == 2 and args[0] in ("--profile", "-p"):
        return Path(args[1])
    if len(args) == 1 and args[0].startswith("--profile="):
        return Path(args[0].split("=", 1)[1])
    return False


def main() -> None:
    if sys.argv[1:] == ["status", "--line"]:  # tmux / a prompt, every few seconds: no Typer, no pydantic
        from backend.watch.inbox import main as status_line

        sys.exit(status_line())
    profile = _tui_profile(sys.argv[1:])
    if profile is False:
        full_app()()
        return
    from backend.paths import SHIPPED_PROFILES_DIR
    from tui.app import run_app

    run_app(profile_path=profile or SHIPPED_PROFILES_DIR / "quickstart.toml")
