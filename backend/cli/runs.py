"""Run commands: run, runs, status, logs, stop, resume, attach, delete."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.console import Console
from rich.table import Table

from backend.cli.common import console, err_console, fail, find_run_or_exit, load_or_exit
from backend.events import EventReader
from backend.runs import index
from backend.runs.layout import RunFolder
from backend.runs.manager import (
    LaunchRefused,
    delete_run,
    list_runs,
    refresh,
    resume_run,
    start_run,
    stop_run,
    summarize,
)



def run(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start and return at once.")] = False,
    workspace: Annotated[Path | None, typer.Option(help="Folder for the run folder.")] = None,
) -> None:
    """Start a run. It survives this terminal; Ctrl-C only stops following it."""
    loaded, path = load_or_exit(profile)
    try:
        folder = start_run(loaded, base_dir=path.parent, workspace=workspace)
    except LaunchRefused as err:
        for problem in err.problems:
            err_console.print(str(problem), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"started run [bold]{folder.run_id}[/]\n  folder: {folder.path}", highlight=False, soft_wrap=True)
    if detach:
        print(folder.run_id)
        return
    follow(folder)


def follow(folder: RunFolder) -> None:
    """Show progress, loss and loss scale until the run ends; Ctrl-C detaches."""
    reader = EventReader(folder.events_path)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
                      TextColumn("{task.fields[metrics]}"), console=console) as progress:
            task = progress.add_task("starting", total=None, metrics="")
            while True:
                for event in reader.read_new():
                    _show_event(progress, task, event)
                state = refresh(folder)
                if not state.is_active:
                    for event in reader.read_new():
                        _show_event(progress, task, event)
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        console.print(f"\ndetached; the run goes on. Reattach: workbench status {folder.run_id} "
                      f"(or open it in `workbench`), follow the log: workbench logs -f {folder.run_id}",
                      highlight=False, markup=False, soft_wrap=True)
        return
    _print_ending(folder)


def _show_event(progress: Progress, task: int, event: dict) -> None:
    if event.get("rank", 0) != 0:
        return
    if event["type"] == "run_begin":
        progress.update(task, description="training", total=event.get("max_steps") or None,
                        completed=event.get("start_step", 0))
    elif event["type"] == "log":
        metrics = f"loss {event['loss']:.4f}" if event.get("loss") is not None else ""
        if event.get("loss_scale") is not None:
            metrics += f"  scale {event['loss_scale']:g}  overflows {event.get('overflow_count', 0)}"
        progress.update(task, completed=event["step"], total=event.get("max_steps"), metrics=metrics)
    elif event["type"] == "run_end":
        progress.update(task, completed=event["step"])


def _print_ending(folder: RunFolder) -> None:
    state = folder.read_state()
    colour = {"finished": "green", "stopped": "yellow"}.get(state.status, "red")
    console.print(f"run {folder.run_id}: [{colour}]{state.status}[/]", highlight=False)
    if state.failure_reason:
        console.print(f"  reason: {state.failure_reason}", highlight=False, markup=False)
    checkpoints = folder.checkpoints()
    if checkpoints:
        console.print(f"  last checkpoint: {checkpoints[-1]}", highlight=False, soft_wrap=True)
    if state.status == "failed":
        raise typer.Exit(1)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def runs() -> None:
    """List every run (running first), from any directory."""
    headers = ("id", "profile", "status", "step", "loss", "elapsed", "age")
    table = Table(*headers, box=None)
    rows = []
    for folder in list_runs():
        s = summarize(folder)
        step = f"{s.step}/{s.max_steps}" if s.step is not None else "-"
        loss = f"{s.loss:.4f}" if s.loss is not None else "-"
        rows.append((folder.run_id, s.state.profile_name, s.state.status, step, loss, _age(s.elapsed_seconds),
                     _age(time.time() - s.state.created_at)))
    for row in rows:
        table.add_row(*row)
    # never shorten a cell (the id is what every other command takes), even in a narrow terminal
    widths = [max(len(cell) for cell in column) + 2 for column in zip(headers, *rows)]
    Console(width=max(console.width, sum(widths))).print(table)  # console.print clamps to the terminal


def status(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """State of one run: status, progress, loss, failure reason, memory forecast vs measured."""
    folder = find_run_or_exit(run_ref)
    s = summarize(folder)
    from backend.runs.memory_report import memory_comparison

    memory = memory_comparison(folder)
    if as_json:
        print(json.dumps({"state": s.state.model_dump(), "step": s.step, "max_steps": s.max_steps, "loss": s.loss,
                          "loss_scale": s.loss_scale, "memory": memory}, indent=2))
        return
    console.print(f"run {folder.run_id}  [bold]{s.state.status}[/]  ({s.state.profile_name})", highlight=False)
    console.print(f"  folder: {folder.path}", highlight=False)
    if s.step is not None:
        loss = f"{s.loss:.4f}" if s.loss is not None else "-"
        console.print(f"  step {s.step}/{s.max_steps}  loss {loss}  elapsed {_age(s.elapsed_seconds)}"
                      f"  eta {_age(s.eta_seconds)}", highlight=False)
    if s.loss_scale is not None:
        console.print(f"  loss scale {s.loss_scale:g}", highlight=False)
    if s.state.failure_reason:
        console.print(f"  reason: {s.state.failure_reason}", highlight=False, markup=False)
    for line in memory["lines"]:
        console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def logs(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    follow_log: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the log grows.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines of the tail to print first.")] = 40,
) -> None:
    """Print a run's log (stdout+stderr of the training)."""
    folder = find_run_or_exit(run_ref)
    text = folder.log_tail(max_bytes=200 * max(lines, 1))
    print("\n".join(text.splitlines()[-lines:]))
    if not follow_log:
        return
    try:
        with open(folder.log_path, "rb") as handle:
            handle.seek(0, 2)
            while True:
                chunk = handle.read()
                if chunk:
                    print(chunk.decode("utf-8", errors="replace"), end="", flush=True)
                elif not refresh(folder).is_active:
                    break
                else:
                    time.sleep(0.3)
    except KeyboardInterrupt:
        pass


def stop(run_ref: Annotated[str, typer.Argument(metavar="RUN")]) -> None:
    """Stop a run: SIGINT to all its processes, then SIGTERM, then SIGKILL."""
    folder = find_run_or_exit(run_ref)
    for line in stop_run(folder, report=lambda text: err_console.print(text, highlight=False)):
        console.print(line, highlight=False)
    console.print(f"run {folder.run_id}: {folder.read_state().status}", highlight=False)


def resume(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    detach: Annotated[bool, typer.Option("--detach", "-d")] = False,
) -> None:
    """Continue a stopped or failed run from its last checkpoint."""
    folder = find_run_or_exit(run_ref)
    try:
        resume_run(folder)
    except ValueError as err:
        fail(str(err))
    state = folder.read_state()
    console.print(f"resumed run {folder.run_id} from {state.resumed_from}", highlight=False)
    if not detach:
        follow(folder)


def attach(folder: Annotated[Path, typer.Argument(help="An existing run folder (e.g. made by a SLURM job).")]) -> None:
    """Register an existing run folder so the workbench lists and monitors it."""
    run_folder = RunFolder(folder)
    if not run_folder.exists():
        fail(f"{folder} is not a run folder (no state.json)")
    index.register(run_folder.path)
    console.print(f"attached {run_folder.run_id}: {refresh(run_folder).status}", highlight=False)


def delete(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a finished, failed or stopped run folder (never a running one)."""
    folder = find_run_or_exit(run_ref)
    if not yes and not typer.confirm(f"delete {folder.path} and its checkpoints?"):
        raise typer.Exit(1)
    try:
        delete_run(folder)
    except ValueError as err:
        fail(str(err))
    console.print(f"deleted {folder.run_id}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("runs")(runs)
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("stop")(stop)
    app.command("resume")(resume)
    app.command("attach")(attach)
    app.command("delete")(delete)
