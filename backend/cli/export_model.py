"""`workbench export-model RUN --to FORMAT`: ship a checkpoint (merged, Ollama, GGUF, 4-bit) and check its answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit
from backend.core.safe_text import visible_lines
from backend.jobs.job import JobFolder

FORMAT_HELP = ("merged (16-bit, the merge job), ollama (a Modelfile with the training template), gguf (needs "
               "llama.cpp's converter), bnb-4bit | awq | gptq (need a GPU)")


def export_model(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    to: Annotated[str, typer.Option("--to", help=FORMAT_HELP)],
    checkpoint: Annotated[int | None, typer.Option("--checkpoint", "-c", help="Checkpoint step.")] = None,
    best: Annotated[bool, typer.Option("--best", help="The best checkpoint, as `workbench checkpoints RUN` ranks "
                                       "them (the default when --checkpoint is not given).")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder to write (must not exist; default: "
                                             "<run>/exports/checkpoint-N-FORMAT, merged: <run>/merged/...).")] = None,
    rows: Annotated[int, typer.Option(min=1, help="Prompts of the parity check (the first rows of the run's "
                                      "validation data, else its training data).")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result and the parity report as JSON.")] = False,
) -> None:
    """Export a run's checkpoint to a format people serve, then check it answers like the trained checkpoint."""
    from backend.ship.export_model import ExportFailed, ExportRefused, plan_export, run_export
    from backend.ship.parity import describe

    if best and checkpoint is not None:
        fail("--best and --checkpoint choose the checkpoint both; pass one of them")
    run = find_run_or_exit(run_ref)
    try:
        plan = plan_export(run, to, checkpoint, out)
    except ExportRefused as err:
        fail(str(err))
    say = (lambda text: None) if as_json else (
        lambda text: console.print(visible_lines(text), markup=False, highlight=False, soft_wrap=True))
    say(f"export {plan.checkpoint.name} of {run.run_id} to {to}: {plan.target}")
    for note in plan.notes:
        say(f"  {note}")

    def seen(what: str, job: JobFolder) -> None:
        say(f"{what}: job {job.job_id} (log: {job.log_path})")

    try:
        result = run_export(plan, rows=rows, seen=seen)
    except ExportRefused as err:
        fail(str(err))
    except ExportFailed as err:
        fail(str(err), code=1)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return
    say(f"written: {result.folder}")
    if result.parity is not None:
        for line in describe(result.parity):
            say(line)


def register(app: typer.Typer) -> None:
    app.command("export-model")(export_model)
