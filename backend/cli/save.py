"""`workbench save RUN`: a checkpoint now, from a running run (#27)."""

from __future__ import annotations

from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit
from backend.core.safe_text import visible


def save(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    stop: Annotated[bool, typer.Option("--stop", help="Save, then stop the run cleanly (as SIGUSR1 does).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0, help="Seconds to wait for the checkpoint.")] = 120.0,
) -> None:
    """Save a checkpoint now: the trainer saves at the end of its current step and goes on (or, with --stop,
    stops). Prints the checkpoint's path. The ask is the file save.request in the run folder, which the
    trainer looks for after every step; SIGUSR1 to a trainer process or to its supervisor saves and stops."""
    from backend.runs.errors import RunRefused
    from backend.runs.save_now import ask_for_checkpoint

    folder = find_run_or_exit(run_ref)
    try:
        outcome = ask_for_checkpoint(folder, stop=stop, timeout=timeout)
    except RunRefused as err:
        fail(visible(err))
    for line in outcome.lines:
        console.print(visible(line), highlight=False, markup=False, soft_wrap=True)
    if outcome.checkpoint is None:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("save")(save)
