"""Run commands: run, runs, status, logs, stop, resume, attach, delete."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from backend.cli.common import console, err_console, fail, find_run_or_exit, load_or_exit
from backend.cli.sky import sync
from backend.cluster.follow import seen_line
from backend.contract.events import Event, EventReader, Log, RunBegin, RunEnd
from backend.core.safe_text import visible
from backend.core.tail import Tail, last_lines
from backend.core.units import duration
from backend.rundir import index
from backend.rundir.layout import RunFolder, RunState
from backend.rundir.startup import Startup, read_startup
from backend.runs.delete import delete_run
from backend.runs.errors import LaunchRefused, RunNotFound
from backend.runs.lookup import find_run
from backend.runs.resume import resume_run
from backend.runs.start import start_run
from backend.runs.status import SKY_SAID, SLURM_SAID, refresh
from backend.runs.stop import stop_run_result
from backend.runs.summaries import SummaryCache, summarize


def run(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start and return at once.")] = False,
    workspace: Annotated[Path | None, typer.Option(help="Folder for the run folder.")] = None,
    on: Annotated[str, typer.Option("--on", help="Where: local (this machine) or sky (a SkyPilot managed job).")] = "local",
    bucket: Annotated[str | None, typer.Option(help="--on sky: the bucket the run folder lives in.")] = None,
    accelerator: Annotated[str | None, typer.Option(help="--on sky: the GPU (default: any the forecast fits).")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="--on sky: spot instances (preemptions are recovered).")] = False,
    infra: Annotated[str | None, typer.Option(help="--on sky: aws, gcp/us-central1, k8s ...")] = None,
) -> None:
    """Start a run. It survives this terminal; Ctrl-C only stops following it."""
    loaded, path = load_or_exit(profile)
    if on not in ("local", "sky"):
        fail(f"--on {visible(on, 40)}: use local or sky")
    if on == "sky":
        from backend.cli.sky import submit_to_sky

        submit_to_sky(loaded, path.parent, bucket=bucket, accelerator=accelerator, spot=spot, infra=infra, workspace=workspace)
        return
    try:
        folder = start_run(loaded, base_dir=path.parent, workspace=workspace)
    except LaunchRefused as err:
        _refused(err)
    console.print(f"started run [bold]{folder.run_id}[/]\n  folder: {folder.path}", highlight=False, soft_wrap=True)
    _print_id_or_follow(folder, detach)


def _refused(err: LaunchRefused) -> NoReturn:
    """Each problem of a refused launch on its own line, as written; exit 2."""
    for problem in err.problems:
        err_console.print(str(problem), style="red", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def _print_id_or_follow(folder: RunFolder, detach: bool) -> None:
    """A started run: its id alone for scripts (`--detach`), else follow its log until Ctrl-C."""
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
    for problem in reader.problems():
        err_console.print(f"events: {problem}", highlight=False, markup=False)
    _print_ending(folder)


def _show_event(progress: Progress, task: TaskID, event: Event) -> None:
    """One event on the progress line (events are typed: a damaged line never gets here)."""
    if event.rank != 0:
        return
    if isinstance(event, RunBegin):
        progress.update(task, description="training", total=event.max_steps or None, completed=event.start_step or 0)
    elif isinstance(event, Log) and event.step is not None:
        metrics = f"loss {event.loss:.4f}" if event.loss is not None else ""
        if event.loss_scale is not None:
            metrics += f"  scale {event.loss_scale:g}  overflows {event.overflow_count or 0}"
        progress.update(task, completed=event.step, total=event.max_steps, metrics=metrics)
    elif isinstance(event, RunEnd) and event.step is not None:
        progress.update(task, completed=event.step)


def _print_ending(folder: RunFolder) -> None:
    state = folder.read_state()
    colour = {"finished": "green", "stopped": "yellow"}.get(state.status, "red")
    console.print(Text.assemble(f"run {visible(folder.run_id)}: ", (state.status, colour)), highlight=False)
    if state.failure_reason:
        console.print(f"  reason: {visible(state.failure_reason)}", highlight=False, markup=False)
    checkpoints = folder.complete_checkpoints()
    if checkpoints:
        console.print(f"  last complete checkpoint: {visible(checkpoints[-1])}", highlight=False, markup=False,
                      soft_wrap=True)
    if state.status == "failed":
        raise typer.Exit(1)


def _age(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return duration(seconds)


def runs() -> None:
    """List every run (running first), from any directory."""
    headers = ("id", "profile", "status", "step", "loss", "elapsed", "age")
    table = Table(*headers, box=None)
    rows = []
    notes = []
    loaded = SummaryCache().reload()
    for s in loaded.summaries:
        folder = s.run
        step = f"{s.step}/{s.max_steps}" if s.step is not None else "-"
        loss = f"{s.loss:.4f}" if s.loss is not None else "-"
        where = s.state.elsewhere() if s.state.status != "damaged" else None
        status_cell = f"{s.state.status} @{s.state.host}" if where and s.state.is_active else s.state.status
        # text from files is shown as plain text: escapes visible, never markup
        rows.append((visible(folder.run_id), visible(s.state.profile_name, 80), status_cell, step, loss,
                     _age(s.elapsed_seconds), _age(time.time() - s.state.created_at)))
        reason = s.state.failure_reason or ""
        if s.state.status in ("damaged", "unknown") or reason.startswith(("damaged", SLURM_SAID, SKY_SAID)):
            notes.append(f"{visible(folder.run_id)}: {visible(s.state.failure_reason)}")
        seen = seen_line(folder.path, elsewhere=where) if s.state.is_active else None
        if seen:  # a run from elsewhere: how old what is seen of it is (#40)
            notes.append(f"{visible(folder.run_id)}: {seen}")
        if s.attempt:  # an OOM retry of the queue, linked both ways (backend/runs/attempts.py)
            notes.append(f"{visible(folder.run_id)}: {s.attempt}")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    # never shorten a cell (the id is what every other command takes), even in a narrow terminal
    widths = [max(len(cell) for cell in column) + 2 for column in zip(headers, *rows, strict=True)]
    Console(width=max(console.width, sum(widths))).print(table)  # console.print clamps to the terminal
    for note in notes:
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    for problem in [*loaded.problems, *index.index_problems()]:
        err_console.print(visible(problem), highlight=False, markup=False, soft_wrap=True)


def status(
    run_ref: Annotated[str | None, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    line: Annotated[bool, typer.Option("--line", help="One short line over every running run and unseen "
                                       "alerts, for tmux's status-right or a shell prompt.")] = False,
) -> None:
    """State of one run: status, progress, loss, failure reason, memory forecast vs measured."""
    if line:  # `workbench status --line` alone takes a faster path in backend/cli/__init__.py
        from backend.watch.inbox import main as status_line

        raise typer.Exit(status_line())
    if run_ref is None:
        err_console.print("name a run (`workbench runs` lists them), or use --line", highlight=False, markup=False)
        raise typer.Exit(2)
    folder = find_run_or_exit(run_ref)
    s = summarize(folder)
    from backend.runs.memory_report import memory_comparison

    try:
        memory = memory_comparison(folder)
    except (OSError, ValueError, TypeError, KeyError) as err:  # a damaged forecast.json or events line
        memory = {"lines": [f"memory: not shown ({visible(type(err).__name__)}: {visible(err, 200)})"]}
    startup = _startup(folder, s.state, s.step)
    if as_json:
        print(json.dumps({"state": s.state.model_dump(), "step": s.step, "max_steps": s.max_steps, "loss": s.loss,
                          "loss_scale": s.loss_scale, "memory": memory,
                          "startup": startup.to_json() if startup else None}, indent=2))
        return
    console.print(Text.assemble(f"run {visible(folder.run_id)}  ", (s.state.status, "bold"),
                                f"  ({visible(s.state.profile_name, 200)})"), highlight=False)
    console.print(f"  folder: {visible(folder.path)}", highlight=False, markup=False)
    where = s.state.elsewhere() if s.state.status != "damaged" else None
    if where:
        console.print(f"  host: {visible(s.state.host)} ({visible(where)})", highlight=False, markup=False)
    seen = seen_line(folder.path, elsewhere=where)
    if seen:
        console.print(f"  seen: {seen}", highlight=False, markup=False, soft_wrap=True)
    if where is None and s.state.is_active and s.state.supervisor_pid is not None:
        console.print(f"  supervisor: pid {s.state.supervisor_pid} (save and stop: `workbench signal "
                      f"{visible(folder.run_id)} save-and-stop` sends it SIGUSR1)", highlight=False, markup=False,
                      soft_wrap=True)
    if s.step is not None:
        loss = f"{s.loss:.4f}" if s.loss is not None else "-"
        console.print(f"  step {s.step}/{s.max_steps}  loss {loss}  elapsed {_age(s.elapsed_seconds)}"
                      f"  eta {_age(s.eta_seconds)}", highlight=False)
    if startup is not None:
        console.print(f"  starting: {startup.text(time.time())}", highlight=False, markup=False)
    if s.loss_scale is not None:
        console.print(f"  loss scale {s.loss_scale:g}", highlight=False)
    if s.state.failure_reason:
        console.print(f"  reason: {visible(s.state.failure_reason)}", highlight=False, markup=False)
    for line in memory["lines"]:
        console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    from backend.doctor.report import verdict_lines

    for verdict in verdict_lines(folder):  # the throughput doctor's findings (#38), without its FLOPs (no child)
        console.print(f"  {verdict}", highlight=False, markup=False, soft_wrap=True)


def _startup(folder: RunFolder, state: RunState, step: int | None) -> Startup | None:
    """What a running run that logged no step yet is doing (#35)."""
    if step is not None or not state.is_active:
        return None
    return read_startup(folder, state.started_at or state.created_at)


def logs(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    follow_log: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the log grows.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines of the tail to print first.")] = 40,
) -> None:
    """Print a run's log (stdout+stderr of the training)."""
    folder = find_run_or_exit(run_ref)
    window = last_lines(folder.log_path, 200 * max(lines, 1))
    print("\n".join(window.text.splitlines()[-lines:]))
    if follow_log:
        follow_log_file(folder, Tail(folder.log_path, window.end))


def follow_log_file(folder: RunFolder, tail: Tail, poll_seconds: float = 0.3) -> None:
    """Print what the log grows by until the run ends (Ctrl-C stops); one incremental UTF-8 decoder, so a
    character split across two writes is printed whole."""
    try:
        while True:
            text = tail.read_text()
            if text:
                print(text, end="", flush=True)
            elif not refresh(folder).is_active:
                break
            else:
                time.sleep(poll_seconds)
    except KeyboardInterrupt:
        pass


def stop(run_ref: Annotated[str, typer.Argument(metavar="RUN")]) -> None:
    """Stop a run: SIGINT to all its processes, then SIGTERM, then SIGKILL."""
    folder = find_run_or_exit(run_ref)
    result = stop_run_result(folder, report=lambda text: err_console.print(text, highlight=False, markup=False))
    for line in result.lines:
        console.print(visible(line), highlight=False, markup=False)
    console.print(f"run {visible(folder.run_id)}: {refresh(folder).status}", highlight=False, markup=False)
    if not result.stopped:
        raise typer.Exit(1)


def resume(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    detach: Annotated[bool, typer.Option("--detach", "-d")] = False,
    as_new_run: Annotated[bool, typer.Option(
        "--as-new-run", help="A finished run: train further as a new run from its last checkpoint's weights "
                             "(fresh optimizer and schedule; the finished run is not touched).")] = False,
    max_steps: Annotated[int | None, typer.Option(
        "--max-steps", min=1, help="With --as-new-run: optimizer steps of the new run (default: the profile's).")] = None,
    allow_world_change: Annotated[bool, typer.Option(
        "--allow-world-change", help="Resume although the run's profile.toml now asks for another world (machines, "
                                     "processes per machine, micro batch, accumulation) than the checkpoint's; "
                                     "says what changes.")] = False,
) -> None:
    """Continue a stopped or failed run from its last checkpoint (a finished one: --as-new-run)."""
    folder = find_run_or_exit(run_ref)
    if as_new_run:
        _continue_as_new_run(folder, max_steps, detach)
        return
    if max_steps is not None:
        fail("--max-steps goes with --as-new-run (a resumed run keeps its own steps)")
    say = lambda line: console.print(visible(line), highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    try:
        resume_run(folder, allow_world_change=allow_world_change, report=say)
    except ValueError as err:
        fail(visible(err))
    state = folder.read_state()
    console.print(f"resumed run {visible(folder.run_id)} from {visible(state.resumed_from)}", highlight=False,
                  markup=False)
    if not detach:
        follow(folder)


def _continue_as_new_run(folder: RunFolder, max_steps: int | None, detach: bool) -> None:
    from backend.runs.continuation import continue_as_new_run

    try:
        new = continue_as_new_run(folder, max_steps=max_steps)
    except LaunchRefused as err:
        _refused(err)
    except ValueError as err:
        fail(visible(err))
    console.print(f"continued run {visible(folder.run_id)} as the new run {visible(new.run_id)}\n  folder: "
                  f"{visible(new.path)}", highlight=False, markup=False, soft_wrap=True)
    _print_id_or_follow(new, detach)


def attach(folder: Annotated[Path, typer.Argument(help="An existing run folder (e.g. made by a SLURM job).")]) -> None:
    """Register an existing run folder so the workbench lists and monitors it."""
    run_folder = RunFolder(folder)
    problem = run_folder.identity_problem()
    if problem:
        fail(visible(problem))
    index.register(run_folder.path)
    console.print(f"attached {visible(run_folder.run_id)}: {refresh(run_folder).status}", highlight=False,
                  markup=False)


def delete(
    run_ref: Annotated[str, typer.Argument(metavar="RUN")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a finished, failed, stopped or damaged run folder (never a running one, never a folder
    that is not a run). RUN is the full id, a unique start of it, or the run folder."""
    try:
        folder = find_run(run_ref, strict=True)
    except RunNotFound as err:
        fail(visible(err))
    state = refresh(folder)
    what = f"damaged run {folder.path} ({state.failure_reason})" if state.status == "damaged" else str(folder.path)
    from backend.checkpoints.pins import pins_lost_on_delete

    pinned = pins_lost_on_delete(folder)
    if pinned and yes:
        console.print(visible(f"deleting {folder.run_id}: {pinned}"), highlight=False, markup=False)
    if not yes and not typer.confirm(visible(f"delete {what} and its checkpoints?" + (f" ({pinned})" if pinned else ""))):
        raise typer.Exit(1)
    try:
        delete_run(folder)
    except ValueError as err:
        fail(visible(err))
    console.print(f"deleted {visible(folder.run_id)}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("runs")(runs)
    app.command("status")(status)
    app.command("sync")(sync)
    app.command("logs")(logs)
    app.command("stop")(stop)
    app.command("resume")(resume)
    app.command("attach")(attach)
    app.command("delete")(delete)
