"""The Typer app: `workbench` and its sub-commands.

Each sub-command module exposes `register(app)` and stays a thin layer over backend/.
Heavy imports (torch, swift, Textual) happen inside the commands that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import backend.cli.common as common

app = typer.Typer(
    name="workbench",
    help="Terminal fine-tuning workbench for ms-swift. Run without a command to open the TUI.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def open_tui(
    ctx: typer.Context,
    profile: Annotated[
        Path | None, typer.Option("--profile", "-p", help="Profile to open (default: profiles/quickstart.toml).")
    ] = None,
    refresh: Annotated[
        float | None, typer.Option("--refresh", min=0.1, help="Seconds between monitor updates (default 2; "
                                   "5 on a slow SSH link). Key i changes it in the app.")
    ] = None,
    low_bandwidth: Annotated[
        bool, typer.Option("--low-bandwidth", help="Sparklines instead of braille plots (key b in the monitor).")
    ] = False,
) -> None:
    """Open the workbench TUI on a profile (the quickstart by default)."""
    if ctx.invoked_subcommand != "queue":  # the queue's own commands start the keeper themselves
        from backend.cli.queue import wake

        wake()  # queued runs wait and no keeper is alive (a reboot): start it
    if ctx.invoked_subcommand is not None:
        return
    from tui.app import run_app  # Textual is imported only when the TUI is asked for

    run_app(profile_path=profile or common.default_profile_path(), refresh_seconds=refresh,
            low_bandwidth=low_bandwidth)


def full_app() -> typer.Typer:
    """The app with every sub-command registered (once); tests drive this one."""
    if not app.registered_commands:
        import backend.cli.checkpoints as checkpoints
        import backend.cli.data as data
        import backend.cli.doctor as doctor
        import backend.cli.estimate as estimate
        import backend.cli.evaluate as evaluate
        import backend.cli.export as export
        import backend.cli.export_model as export_model
        import backend.cli.golden as golden
        import backend.cli.jobs as jobs
        import backend.cli.preflight as preflight
        import backend.cli.profiles as profiles
        import backend.cli.queue as queue
        import backend.cli.runs as runs
        import backend.cli.save as save
        import backend.cli.signals as signals
        import backend.cli.watch as watch

        for module in (profiles, runs, save, estimate, jobs, checkpoints, golden, export, export_model, watch, data,
                       queue, evaluate, signals, doctor, preflight):
            module.register(app)
    return app
