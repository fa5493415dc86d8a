"""`workbench export-model RUN --to FORMAT`: ship a checkpoint (merged, Ollama, GGUF, 4-bit) and check its answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit
from backend.cli.jobs import follow_job
from backend.core.safe_text import visible_lines
from backend.jobs.job import wait_job

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
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start the export job and return at once (`workbench "
                                         "jobs RUN` follows it).")] = False,
) -> None:
    """Export a run's checkpoint to a format people serve, then check it answers like the trained checkpoint.

    The export is one job of the run (merge, export, parity): it goes on when this command ends (Ctrl-C
    detaches); `workbench jobs RUN --stop JOB` stops it."""
    from backend.ship.export_model import ExportRefused
    from backend.ship.pipeline import read_result, result_lines, start_export_pipeline

    if best and checkpoint is not None:
        fail("--best and --checkpoint choose the checkpoint both; pass one of them")
    run = find_run_or_exit(run_ref)
    try:
        job, plan = start_export_pipeline(run, to, checkpoint, out, rows=rows)
    except ExportRefused as err:
        fail(str(err))
    say = (lambda text: None) if as_json else (
        lambda text: console.print(visible_lines(text), markup=False, highlight=False, soft_wrap=True))
    say(f"export {plan.checkpoint.name} of {run.run_id} to {to}: {plan.target}")
    for note in plan.notes:
        say(f"  {note}")
    say(f"export job {job.job_id} started (log: {job.log_path})")
    if detach:
        return
    state = wait_job(job) if as_json else follow_job(job)
    if state.status != "finished":
        fail(f"export {state.status}: {state.failure_reason or 'see its log'} (job {job.job_id}, log {job.log_path})",
             code=1)
    if as_json:
        print(json.dumps(read_result(job), indent=2, ensure_ascii=False))
        return
    for line in result_lines(job):
        say(line)


def register(app: typer.Typer) -> None:
    app.command("export-model")(export_model)
