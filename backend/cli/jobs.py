"""Commands on a run's checkpoints: merge, chat, infer, jobs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from backend.chat.client import ChatClient
from backend.chat.protocol import ChatWorkerError, Chunk, Done, Failed, GenerationSettings, WorkerDied, printable
from backend.checkpoints.targets import TargetError, resolve_target
from backend.cli.common import console, err_console, fail, find_run_or_exit
from backend.core.safe_text import visible
from backend.jobs.job import JobFolder, JobState, children, list_jobs, refresh_job, stop_job

RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")]
CheckpointOpt = Annotated[int | None, typer.Option("--checkpoint", "-c", help="Checkpoint step (default: the best, "
                                                   "as `workbench checkpoints RUN` ranks them).")]
DetachOpt = Annotated[bool, typer.Option("--detach", "-d", help="Start the job and return at once.")]



# ---------------------------------------------------------------- merge


def merge(
    run_ref: RunArg,
    checkpoint: CheckpointOpt = None,
    replace: Annotated[bool, typer.Option("--replace", help="Rebuild an existing merged folder "
                                          "(the old one is kept until the new one is complete).")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Folder to write (default: "
                                                "<run>/merged/checkpoint-N-merged).")] = None,
    detach: DetachOpt = False,
) -> None:
    """Merge a LoRA checkpoint into its base model (swift export --merge_lora) as a new model folder."""
    from backend.merge.job import MergeRefused, start_merge

    run = find_run_or_exit(run_ref)
    try:
        job = start_merge(run, checkpoint, output=output, replace=replace)
    except MergeRefused as err:
        fail(str(err))
    spec = job.read_spec()
    console.print(f"merge job {job.job_id} started (log: {job.log_path})", highlight=False, soft_wrap=True)
    for note in spec.notes:
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    if detach:
        return
    _follow_job(job)


# ---------------------------------------------------------------- infer


def infer(
    run_ref: RunArg,
    dataset: Annotated[list[str] | None, typer.Option("--dataset", help="Dataset file (or hub id); repeat for "
                                                      "several. Default: the run's validation split.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results jsonl to write (must not exist; "
                                             "default: results.jsonl in the job folder).")] = None,
    checkpoint: CheckpointOpt = None,
    merged: Annotated[bool, typer.Option("--merged", help="Use the run's merged model.")] = False,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Longest answer in tokens.")] = 256,
    temperature: Annotated[float, typer.Option(min=0.0, max=2.0, help="0 = greedy.")] = 0.0,
    limit: Annotated[int | None, typer.Option(min=1, help="Answer only the first N rows.")] = None,
    show: Annotated[int, typer.Option(help="Rows of prompt / reference / answer to print at the end.")] = 10,
    detach: DetachOpt = False,
) -> None:
    """Answer every row of a dataset with a checkpoint, into a results jsonl (prompt / reference / answer)."""
    from backend.inference.batch import InferRefused, InferSettings, start_infer

    run = find_run_or_exit(run_ref)
    settings = InferSettings(max_new_tokens=max_new_tokens, temperature=temperature, limit=limit)
    try:
        job = start_infer(run, dataset=dataset, out=out, checkpoint=checkpoint, merged=merged, settings=settings)
    except (InferRefused, TargetError) as err:
        fail(str(err))
    console.print(f"inference job {job.job_id} started (log: {job.log_path})", highlight=False, soft_wrap=True)
    for note in job.read_spec().notes:
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    if detach:
        return
    _follow_job(job)
    _print_results(Path(job.read_spec().output), show)


def _print_results(path: Path, rows: int) -> None:
    from backend.inference.batch import read_results

    results = read_results(path)
    table = Table("#", "prompt", "reference", "answer", show_lines=True)
    for row in results[:rows]:
        table.add_row(str(row.index), row.prompt, row.reference or "-", row.answer)
    console.print(table)
    if len(results) > rows:
        console.print(f"... {len(results) - rows} more rows in {path}", highlight=False, soft_wrap=True)


# ---------------------------------------------------------------- jobs


def jobs(
    run_ref: RunArg,
    stop: Annotated[str | None, typer.Option("--stop", metavar="JOB", help="Stop this job of the run (and the jobs "
                                             "it started: an export's merge or parity job).")] = None,
) -> None:
    """List a run's jobs (merge, inference, export, golden prompts, eval), or stop one."""
    run = find_run_or_exit(run_ref)
    found = list_jobs(run.jobs_dir)
    if stop is not None:
        _stop(found, stop)
        return
    table = Table(box=None)
    # a job id is what `workbench job` takes: never cut or wrapped, in any terminal; the reason wraps instead
    table.add_column("job", no_wrap=True, min_width=max((len(visible(j.job_id)) for j in found), default=3))
    table.add_column("status", no_wrap=True)
    table.add_column("progress")
    table.add_column("result / reason", overflow="fold")
    for job in found:
        state = refresh_job(job)
        progress = job.progress()
        fraction = f"{progress.fraction:.0%} {progress.label}" if progress.fraction is not None else progress.label
        table.add_row(*(Text(visible(cell)) for cell in (job.job_id, state.status, fraction,
                                                          state.result or state.failure_reason or "")))
    console.print(table)


def _stop(found: list[JobFolder], job_id: str) -> None:
    job = next((j for j in found if j.job_id == job_id), None)  # only a job folder of this run's jobs/
    if job is None:
        fail(f"--stop: the run has no job {visible(job_id)} (workbench jobs RUN lists them)")
    state = stop_job(job)
    said = [f"job {job.job_id}: {state.status}"]
    said += [f"  started by it: job {child.job_id}: {child.read_state().status}" for child in children(job)]
    console.print("\n".join(visible(line) for line in said), highlight=False, markup=False)
    if state.is_active:
        raise typer.Exit(1)


def _follow_job(job: JobFolder) -> None:
    """Show the job's progress until it ends, then how it ended; Ctrl-C detaches (the job goes on)."""
    follow_job(job)
    state = job.read_state()
    seconds = f" in {state.seconds:.1f} s" if state.seconds else ""
    if state.status == "finished":
        console.print(f"[green]finished[/]{seconds}: {state.result}", highlight=False, soft_wrap=True)
        return
    err_console.print(f"[red]{state.status}[/]{seconds}: {state.failure_reason or ''}", highlight=False,
                      soft_wrap=True)
    tail = "\n".join(job.log_tail(4000).splitlines()[-8:])
    err_console.print(tail, highlight=False, markup=False)
    raise typer.Exit(1)


def follow_job(job: JobFolder) -> JobState:
    """Show the job's progress until it ends; Ctrl-C detaches (the job goes on)."""
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err_console) as bar:
            task = bar.add_task("starting", total=1.0)
            while True:
                state = refresh_job(job)
                progress = job.progress()
                bar.update(task, description=progress.label, completed=progress.fraction or 0.0)
                if not state.is_active:
                    break
                time.sleep(0.3)
    except KeyboardInterrupt:
        console.print(f"\ndetached; the job goes on (workbench jobs RUN shows it; log: {job.log_path})",
                      highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(0) from None
    return job.read_state()


# ---------------------------------------------------------------- chat


def chat(
    ref: Annotated[str, typer.Argument(metavar="RUN|MODEL_DIR", help="A run (its best checkpoint unless "
                                       "--checkpoint), a checkpoint or model folder, builtin:tiny-qwen2, a hub id.")],
    checkpoint: CheckpointOpt = None,
    merged: Annotated[bool, typer.Option("--merged", help="The run's merged model (see workbench merge).")] = False,
    system: Annotated[str | None, typer.Option(help="System prompt (default: the template's).")] = None,
    temperature: Annotated[float, typer.Option(min=0.0, max=2.0, help="0 = greedy.")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling cut-off.")] = 0.9,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Longest answer in tokens.")] = 256,
    compare: Annotated[bool, typer.Option("--compare", help="Also answer with the base model.")] = False,
    model_type: Annotated[str | None, typer.Option(help="swift model_type, for a folder swift cannot tell.")] = None,
    template: Annotated[str | None, typer.Option(help="swift template, for a folder swift cannot tell.")] = None,
) -> None:
    """Talk to a model, tokens streaming in. Prompts come from stdin, one a line.

    /reset starts a new conversation, /exit (or end of input) ends. Ctrl-C stops an answer.
    """
    try:
        target = resolve_target(ref, checkpoint=checkpoint, merged=merged, model_type=model_type, template=template)
    except TargetError as err:
        fail(str(err))
    if target.reason:
        err_console.print(f"checkpoint: {target.reason}", highlight=False, markup=False, soft_wrap=True)
    settings = GenerationSettings(system=system, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    if settings.problems():
        fail("; ".join(settings.problems()))
    targets = [target]
    if compare:
        base = target.base()
        if base is None:
            fail(f"--compare: the base model of {target.label} is not known; chat with the base separately")
        targets.append(base)
    clients = [ChatClient(t, name=("tuned" if i == 0 else "base")) for i, t in enumerate(targets)]
    try:
        _load(clients)
        _conversation(clients, settings)
    except KeyboardInterrupt:  # at the prompt or while loading (mid-answer it only stops the answer)
        err_console.print()
    finally:
        for client in clients:
            client.close()


def _load(clients: list[ChatClient]) -> None:
    for client in clients:
        err_console.print(f"loading {client.target.label} ...", highlight=False, soft_wrap=True)
        client.start()
    for client in clients:
        try:
            ready = client.wait_ready()
        except ChatWorkerError as err:
            fail(str(err), code=1)
        err_console.print(f"{client.target.label}: ready in {ready.seconds:.1f} s", highlight=False, soft_wrap=True)


def _conversation(clients: list[ChatClient], settings: GenerationSettings) -> None:
    histories: list[list[dict[str, str]]] = [[] for _ in clients]
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            err_console.print("[bold]you>[/] ", end="")
        line = sys.stdin.readline()
        if not line or line.strip() in ("/exit", "/quit"):
            return
        prompt = line.strip()
        if not prompt:
            continue
        if prompt == "/reset":
            histories = [[] for _ in clients]
            err_console.print("(new conversation)")
            continue
        for client, history in zip(clients, histories, strict=True):
            history.append({"role": "user", "content": prompt})
            if len(clients) > 1:
                print(f"[{client.name}] ", end="", flush=True)
            answer = _stream_answer(client, history, settings)
            if answer is None:
                history.pop()  # unanswered: not part of the conversation
            else:
                history.append({"role": "assistant", "content": answer})


def _stream_answer(client: ChatClient, history: list[dict[str, str]], settings: GenerationSettings) -> str | None:
    """Print one answer as it streams; Ctrl-C stops it (the part said so far is the answer).
    None when the worker could not answer (it goes on)."""
    request_id = client.generate(history, settings)
    while True:
        try:  # Ctrl-C while waiting for a chunk or while printing one: either way it stops the answer
            event = client.next_event(timeout=600)
            if isinstance(event, Chunk) and event.request_id == request_id:
                print(printable(event.text), end="", flush=True)
                continue
        except KeyboardInterrupt:
            client.stop()
            continue
        if event is None or isinstance(event, WorkerDied):
            print()
            fail(event.message if event is not None else "no answer within 600 s", code=1)
        if isinstance(event, Failed) and event.request_id in (request_id, None):
            print()
            err_console.print(f"[red]error:[/] {event.message}", highlight=False)
            return None
        if isinstance(event, Done) and event.request_id == request_id:
            break
    print(flush=True)
    first = f"first token {event.first_token_seconds:.2f} s, " if event.first_token_seconds is not None else ""
    stopped = " (stopped)" if event.finish_reason == "stopped" else ""
    err_console.print(f"[dim]{first}{event.tokens} tokens in {event.seconds:.2f} s{stopped}[/]", highlight=False)
    return event.text


def register(app: typer.Typer) -> None:
    app.command()(merge)
    app.command()(chat)
    app.command()(infer)
    app.command()(jobs)

