"""`workbench doctor RUN [--json] [--apply N]`: why a run is slow (backend/doctor), during or after it."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    apply: Annotated[int | None, typer.Option("--apply", metavar="N", help="Write verdict N's profile change "
                                              "beside the run's profile and queue it as a new run.")] = None,
) -> None:
    """Where the run's step time goes, honest tokens/s and MFU, and the profile change that would help."""
    from backend.doctor.apply import ApplyRefused, apply_verdict, comparisons
    from backend.doctor.report import diagnose

    run = find_run_or_exit(run_ref)
    diagnosis = diagnose(run)
    if apply is not None:
        try:
            applied = apply_verdict(run, diagnosis, apply)
        except ApplyRefused as err:
            fail(str(err))
        console.print(f"wrote {applied.profile_file} ({applied.verdict.change_text()}); queued as entry "
                      f"{applied.entry_id} (`workbench queue` shows it; `workbench doctor {run.run_id}` compares the "
                      f"two runs once it has run)", markup=False, highlight=False)
        return
    if as_json:
        print(json.dumps({**diagnosis.to_json(), "applied": comparisons(run, diagnosis)}, indent=2))
        return
    for line in diagnosis.lines() + comparisons(run, diagnosis):
        console.print(line, markup=False, highlight=False)
