"""`workbench eval RUN [--checkpoint N | --best | --merged] --dataset FILE [--no-base] [--limit N]`: ms-swift's own
`swift eval` (EvalScope) of a checkpoint and of its base model, side by side, as a tracked job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from backend.cli.common import console, fail, find_run_or_exit


def evaluate(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    dataset: Annotated[str, typer.Option("--dataset", metavar="FILE", help="A local jsonl: question-answer rows "
                                         "(query/response) or multiple-choice rows (question, A, B, ..., answer).")],
    checkpoint: Annotated[int | None, typer.Option("--checkpoint", "-c", metavar="N", help="Evaluate checkpoint-N.")
                          ] = None,
    best: Annotated[bool, typer.Option("--best", help="Evaluate the best checkpoint (the default, as `workbench "
                                       "checkpoints RUN` ranks them).")] = False,
    merged: Annotated[bool, typer.Option("--merged", help="Evaluate the run's merged model (of --checkpoint N, "
                                         "else the newest).")] = False,
    base: Annotated[bool, typer.Option("--base/--no-base", help="Evaluate the base model too, side by side.")
                    ] = True,
    limit: Annotated[int | None, typer.Option("--limit", min=1, metavar="N", help="Only the first N rows.")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Longest answer in tokens.")] = 64,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start the job and return at once.")] = False,
) -> None:
    """Evaluate a checkpoint and its base model with `swift eval` on a local dataset (offline), as a job."""
    from backend.cli.jobs import _follow_job
    from backend.evaluation.job import EvalRefused, EvalSettings, start_eval

    if best and checkpoint is not None:
        fail("--best and --checkpoint choose the same thing: pass one of them")
    run = find_run_or_exit(run_ref)
    settings = EvalSettings(limit=limit, max_new_tokens=max_new_tokens, base=base)
    try:
        job = start_eval(run, dataset, checkpoint=checkpoint, merged=merged, settings=settings)
    except EvalRefused as err:
        fail(str(err))
    spec = job.read_spec()
    console.print(f"eval job {job.job_id} started (log: {job.log_path})", highlight=False, markup=False,
                  soft_wrap=True)
    for note in spec.notes:
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    if detach:
        return
    _follow_job(job)
    print_result(Path(spec.output))


def print_result(path: Path) -> None:
    result = json.loads(path.read_text(encoding="utf-8"))
    table = Table("model", result["metric"], "rows", box=None)
    for model in result["models"]:
        score = "-" if model.get("score") is None else f"{model['score']:.4f}"
        table.add_row(model["label"], score, str(result.get("evaluated") or result["rows"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("eval")(evaluate)
