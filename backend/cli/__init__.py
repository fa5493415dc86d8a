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
    from backend.cli.wiring import install

    install()  # the lifecycle floor's lookups and rules, registered with the floors below
    return build()


def _tui_options(args: list[str]) -> dict | None:
    """The TUI's options when the command line only asks for the TUI (--profile, --refresh,
    --low-bandwidth); None otherwise (a sub-command, --help, anything else goes to Typer)."""
    options: dict = {"profile_path": None}
    names = {"--profile": "profile_path", "-p": "profile_path", "--refresh": "refresh_seconds"}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if arg == "--low-bandwidth":
            options["low_bandwidth"] = True
            continue
        if name not in names or (not eq and not rest):
            return None
        value = value if eq else rest.pop(0)
        try:
            options[names[name]] = Path(value) if names[name] == "profile_path" else float(value)
        except ValueError:
            return None  # Typer says what is wrong with it
        if names[name] == "refresh_seconds" and not options["refresh_seconds"] > 0:
            return None
    return options


def main() -> None:
    if sys.argv[1:] == ["status", "--line"]:  # tmux / a prompt, every few seconds: no Typer, no pydantic
        from backend.watch.inbox import main as status_line

        sys.exit(status_line())
    options = _tui_options(sys.argv[1:])
    if options is None:
        full_app()()
        return
    from backend.core.paths import SHIPPED_PROFILES_DIR
    from tui.app import run_app

    options["profile_path"] = options["profile_path"] or SHIPPED_PROFILES_DIR / "quickstart.toml"
    run_app(**options)
