"""`workbench golden RUN [--checkpoint N | --base]`: (re)answer the run's golden prompts by hand, as a job;
`workbench checkpoints RUN --golden [--prompt K]` prints the answers per prompt (golden_view)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit
from backend.rundir.layout import RunFolder


def golden(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    checkpoint: Annotated[int | None, typer.Option("--checkpoint", metavar="N", help="Answer with checkpoint-N "
                                                   "again (its old answers are replaced when the new ones are "
                                                   "complete).")] = None,
    base: Annotated[bool, typer.Option("--base", help="Answer with the base model again.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to end and print the answers.")] = False,
) -> None:
    """Answer the run's golden prompts ([eval] prompts) greedily as a tracked job: by default the base model
    and every complete checkpoint without answers yet; one at a time per run."""
    from backend.core.fs import LockTimeout
    from backend.golden.job import GoldenRefused, start_golden
    from backend.jobs.job import wait_job

    run = find_run_or_exit(run_ref)
    steps = [checkpoint] if checkpoint is not None else ([] if base else None)
    try:
        job = start_golden(run, steps=steps, base=True if base else (False if checkpoint is not None else None))
    except GoldenRefused as err:
        fail(str(err))
    except LockTimeout:
        fail(f"another workbench command is starting a golden job of {run.run_id}; try again")
    spec = job.read_spec()
    console.print(f"started job {job.job_id}: {spec.description}", highlight=False, markup=False, soft_wrap=True)
    for note in spec.notes:
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    if not wait:
        console.print(f"follow it with: workbench jobs {run.run_id}; read the answers with: workbench checkpoints "
                      f"{run.run_id} --golden", highlight=False, markup=False, soft_wrap=True)
        return
    state = wait_job(job)
    if state.status != "finished":
        fail(f"job {job.job_id} {state.status}: {state.failure_reason or 'see its log'} ({job.log_path})", code=1)
    golden_view(run, None, as_json=False)


def golden_view(run: RunFolder, prompt: int | None, as_json: bool) -> None:
    """The per-prompt view of the golden answers (text, or JSON)."""
    from backend.checkpoints.scoreboard import scoreboard
    from backend.golden.answers import read_golden, similarity, view_lines

    found = read_golden(run, scoreboard(run).gone_steps)
    if prompt is not None and found.sets and not 1 <= prompt <= found.count:
        fail(f"--prompt {prompt}: {run.run_id} has {found.count} golden prompts (1 to {found.count})")
    if as_json:
        data = {"run_id": found.run_id, "similarity": "difflib.SequenceMatcher ratio to the reference",
                "answered_by": [s.label for s in found.sets], "gone_before_answered": found.gone,
                "problems": found.problems, "prompts": [
                    {"number": n, "prompt": text, "reference": found.references.get(i),
                     "answers": {s.label: s.answers.get(i) for s in found.sets},
                     "similarity": {s.label: round(similarity(s.answers[i].strip(), ref.strip()), 4)
                                    for s in found.sets if i in s.answers
                                    and (ref := found.references.get(i)) is not None}}
                    for n, (i, text) in enumerate(found.prompts.items(), start=1) if prompt in (None, n)]}
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for line in view_lines(found, prompt):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(golden)
