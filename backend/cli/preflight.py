"""`workbench preflight PROFILE --node K`: the multi-machine checks before a run (#39), on each machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from backend.cli.common import console, load_or_exit


def preflight(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    node: Annotated[int | None, typer.Option("--node", help="This machine's rank (default: the profile's "
                                                            "machine_rank).")] = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", help="The output folder as this machine mounts "
                                                                         "it (default: the profile's).")] = None,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the other machines.")] = 60.0,
) -> None:
    """Before a multi-machine run, on every machine at about the same time: the rendezvous address, the ranks,
    the versions, the shared output folder, a timed all-reduce. Exit 1 when a check fails."""
    from backend.preflight.check import preflight as run_checks

    loaded, _path = load_or_exit(profile)
    rank = loaded.distribution.machine_rank if node is None else node
    checks = run_checks(loaded, rank, output_dir.resolve() if output_dir else None, timeout)
    for check in checks:
        for line in check.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    failed = [c for c in checks if not c.ok]
    console.print(f"machine {rank}: " + (f"{len(failed)} check(s) failed" if failed else "ready"), markup=False,
                  highlight=False)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(preflight)
