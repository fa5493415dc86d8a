"""Queue commands: `workbench queue` (the list), `queue add PROFILE...`, `queue rm|up|down|pause|resume ID`.

Thin layer over backend/queue: every change is made under the queue lock, so these are safe while the
keeper runs; `add` and `resume` start the keeper when none is alive.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated

import psutil
import typer

from backend.cli.common import console, fail, load_or_exit
from backend.core.safe_text import visible
from backend.profile import LaunchProfile
from backend.queue.add import add_profiles
from backend.queue.admission import reasons
from backend.queue.changes import change
from backend.queue.eta import notes, start_estimates
from backend.queue.keeper import ensure_keeper, keeper_pid
from backend.queue.store import (
    QueueDamaged,
    QueueRefused,
    queue_dir,
    read_queue,
)
from backend.queue.sweep import SweepError, expand

queue_app = typer.Typer(help="Runs that wait their turn: started one after another by the queue keeper.",
                        invoke_without_command=True, no_args_is_help=False)


@queue_app.callback()
def show(ctx: typer.Context) -> None:
    """List the queue: order, state, and why each entry waits."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        ensure_keeper()  # after a reboot or a killed keeper, it is back here
        queue = read_queue()
    except QueueDamaged as err:
        fail(str(err))
    for line in queue_lines(queue):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def queue_lines(queue: object) -> list[str]:
    from backend.queue.store import QueueFile

    assert isinstance(queue, QueueFile)
    pid = keeper_pid()
    pending = queue.pending()
    head = f"queue: {len(pending)} pending, {len(queue.entries) - len(pending)} done; " + \
        (f"keeper running (pid {pid})" if pid else "no keeper running")
    lines = [head]
    if not queue.entries:
        return [*lines, "  (empty: `workbench queue add PROFILE` queues a run)"]
    why = reasons(queue, psutil.virtual_memory().available)
    now = time.time()
    starts = start_estimates(queue, now=now, why=why)
    lines.append(f"  {'#':>2}  {'ID':<8} {'NAME':<28} {'STATE':<8} {'STARTS':<18} WHY / RUN")
    order = [*pending, *(e for e in queue.entries if not e.pending)]
    for number, entry in enumerate(order, 1):
        name = visible(entry.name)[:28] + (f" #{entry.attempt}" if entry.attempt > 1 else "")
        start = starts[entry.id].text(now) if entry.id in starts else "-"
        lines.append(f"  {number:>2}  {entry.id:<8} {name:<28} {entry.state:<8} {start:<18} {visible(why[entry.id])}")
    lines += [f"  {visible(note)}" for note in notes(starts)]
    return lines


def add(
    profiles: Annotated[list[str], typer.Argument(help="Profile files, or names of shipped profiles.")],
    gpus: Annotated[str, typer.Option("--gpus", help="auto (the GPUs with most free memory) or ids: 0,1.")] = "auto",
    priority: Annotated[int, typer.Option("--priority", help="Higher starts earlier (default 0).")] = 0,
    hold: Annotated[bool, typer.Option("--hold", help="Queue them paused (`workbench queue resume ID`).")] = False,
    slurm: Annotated[bool, typer.Option("--slurm", help="Submit to SLURM with sbatch (each after the one before; "
                                        "--mem from the memory forecast) instead of the local keeper.")] = False,
    time_limit: Annotated[str, typer.Option("--time", help="--slurm: the jobs' time limit (HH:MM:SS).")] = "04:00:00",
    partition: Annotated[str | None, typer.Option("--partition", help="--slurm: the SLURM partition.")] = None,
    account: Annotated[str | None, typer.Option("--account", help="--slurm: the SLURM account.")] = None,
    sky: Annotated[bool, typer.Option("--sky", help="Submit to SkyPilot as managed jobs (its jobs controller "
                                      "queues them) instead of the local keeper.")] = False,
    bucket: Annotated[str | None, typer.Option("--bucket", help="--sky: the bucket the run folders live in.")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="--sky: spot instances (preemptions are recovered).")] = False,
) -> None:
    """Queue runs (a profile with a sweep grid queues one run per combination); start the keeper."""
    if gpus != "auto" and not re.fullmatch(r"\d+(,\d+)*", gpus):
        fail(f"--gpus {gpus!r}: give auto or GPU ids such as 0,1")
    items = [(profile, path.parent) for profile, path in (load_or_exit(name) for name in profiles)]
    if sky:
        from backend.cli.sky import submit_to_sky

        try:  # a [sweep] is one managed job per combination, as the local queue has one run each
            runs = [(run, base_dir) for profile, base_dir in items for run in expand(profile)]
        except SweepError as err:
            fail(str(err))
        for profile, base_dir in runs:
            submit_to_sky(profile, base_dir, bucket=bucket, accelerator=None, spot=spot, infra=None)
        return
    if slurm:
        _add_slurm(items, gpus=gpus, priority=priority, hold=hold, time_limit=time_limit, partition=partition, account=account)
        return
    try:
        added = add_profiles(items, gpus=gpus, priority=priority, hold=hold)
    except (SweepError, QueueRefused, QueueDamaged) as err:
        fail(str(err))
    for entry in added:
        console.print(f"queued {entry.id}  {visible(entry.name)}", markup=False, highlight=False)
    pid = ensure_keeper()
    console.print(f"keeper: pid {pid}" if pid else "keeper: not started", markup=False, highlight=False)


def _add_slurm(items: list[tuple[LaunchProfile, Path]], *, gpus: str, priority: int, hold: bool, time_limit: str,
               partition: str | None, account: str | None) -> None:
    from backend.launchers.slurm import SlurmOptions
    from backend.queue.slurm import SlurmRefused, submit_profiles

    for given, option in ((gpus != "auto", "--gpus (SLURM gives each job its GPUs: the profile's nproc_per_node)"),
                          (priority != 0, "--priority (SLURM orders the jobs: each is submitted after the one "
                                          "before)"),
                          (hold, "--hold (hold a submitted job with `scontrol hold JOBID`)")):
        if given:
            fail(f"--slurm does not take {option}")
    try:
        added = submit_profiles(items, options=SlurmOptions(time=time_limit, partition=partition, account=account))
    except (SlurmRefused, SweepError, QueueDamaged) as err:
        fail(str(err))
    for entry in added:
        after = f" after job {entry.slurm_dependency}" if entry.slurm_dependency else ""
        note = f" [{entry.note}]" if entry.note else ""
        console.print(f"submitted {entry.id}  {visible(entry.name)}: SLURM job {entry.slurm_job_id}{after}, run "
                      f"{entry.run_id}{note}", markup=False, highlight=False, soft_wrap=True)


def _change(ref: str, what: str) -> None:
    try:
        entry = change(ref, what)
    except (QueueRefused, QueueDamaged) as err:
        fail(str(err))
    console.print(f"{what}: {entry.id}  {visible(entry.name)}" + (f" ({entry.reason})" if entry.slurm_job_id and
                  what == "rm" else ""), markup=False, highlight=False, soft_wrap=True)
    if what == "resume":
        ensure_keeper()


def rm(entry: Annotated[str, typer.Argument(help="Queue entry id (or its start).")]) -> None:
    """Remove a waiting or paused entry (a running one is stopped with `workbench stop RUN`); a SLURM entry's
    job is cancelled (`scancel JOBID`, that job only)."""
    _change(entry, "rm")


def up(entry: Annotated[str, typer.Argument(help="Queue entry id.")]) -> None:
    """Move a waiting entry one place earlier."""
    _change(entry, "up")


def down(entry: Annotated[str, typer.Argument(help="Queue entry id.")]) -> None:
    """Move a waiting entry one place later."""
    _change(entry, "down")


def pause(entry: Annotated[str, typer.Argument(help="Queue entry id.")]) -> None:
    """Hold a waiting entry: the ones behind it go first."""
    _change(entry, "pause")


def resume(entry: Annotated[str, typer.Argument(help="Queue entry id.")]) -> None:
    """Let a paused entry wait its turn again."""
    _change(entry, "resume")


def sweep(ref: Annotated[str, typer.Argument(metavar="SWEEP", help="The sweep's name (its profile's name) or id.")]) -> None:
    """A sweep's runs ranked by their checkpoint scoreboard's best checkpoint (best first)."""
    from backend.queue.sweep import rank_runs, sweep_runs

    try:
        name, runs = sweep_runs(ref)
    except (QueueRefused, QueueDamaged) as err:
        fail(str(err))
    console.print(f"sweep {visible(name)}: {len(runs)} run(s), ranked by their best checkpoint", markup=False,
                  highlight=False, soft_wrap=True)
    for place, ranked in enumerate(rank_runs(runs), 1):
        console.print(f"  {place if ranked.value is not None else '-':>2}  {visible(ranked.run_id)}  "
                      f"{visible(ranked.text)}", markup=False, highlight=False, soft_wrap=True)


def wake() -> None:
    """Any workbench command: start the keeper when entries wait and none is alive (after a reboot)."""
    if not (queue_dir() / "queue.json").exists():
        return
    try:
        ensure_keeper()
    except Exception:  # noqa: BLE001 - the queue never stops another command
        pass


def register(app: typer.Typer) -> None:
    for command in (add, rm, up, down, pause, resume, sweep):
        queue_app.command(command.__name__)(command)
    app.add_typer(queue_app, name="queue")


