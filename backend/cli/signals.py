"""`workbench signal RUN save-and-stop`: SIGUSR1 to the run's supervisor, proven the run's first (#41).

The supervisor's pid lies in state.json, which anyone can edit: the signal goes only to the process of
that pid that started when the record says and carries the run's marker (backend/core/process_identity.py),
and only on the host and in the boot the run was recorded in, as `workbench stop` proves it.
"""

from __future__ import annotations

import signal as signals
from enum import Enum
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit
from backend.core.process_identity import run_marker
from backend.core.safe_text import visible
from backend.runs.status import refresh


class Request(str, Enum):
    save_and_stop = "save-and-stop"


# what each request sends, and what the run then does
SENDS = {Request.save_and_stop: (signals.SIGUSR1, "the trainer saves a checkpoint at the end of its step, then "
                                                  "the run ends `stopped`")}


def signal_run(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    request: Annotated[Request, typer.Argument(help="save-and-stop: SIGUSR1 to the run's supervisor.")],
) -> None:
    """Send a signal to a run's supervisor, proven the run's (its pid, start time and marker), and say
    what was sent to which pid. save-and-stop is SIGUSR1: a checkpoint, then `stopped`."""
    folder = find_run_or_exit(run_ref)
    state = refresh(folder)
    if not state.is_active:
        fail(f"run {visible(folder.run_id)} is {state.status}: there is no supervisor to signal")
    where = state.elsewhere()
    if where:
        fail(f"run {visible(folder.run_id)} was {visible(where)}: nothing was signalled from here; run "
             f"`workbench signal {visible(folder.run_id)} {request.value}` on {visible(state.host)}")
    proc = run_marker(folder.path).owns(state.supervisor_pid, state.supervisor_started)
    if proc is None:
        fail(f"the supervisor recorded in state.json (pid {state.supervisor_pid}) is not provably this run's "
             "(gone, another start time, or no run marker): nothing was signalled")
    sig, outcome = SENDS[request]
    try:
        proc.send_signal(sig)  # psutil checks again that the pid still has the same start time
    except Exception as err:  # psutil.Error: gone in between, or not ours
        fail(f"{sig.name} to the supervisor (pid {proc.pid}) failed: {visible(err)}")
    console.print(f"sent {sig.name} to the supervisor of run {visible(folder.run_id)} (pid {proc.pid}): {outcome}; "
                  f"follow it with `workbench status {visible(folder.run_id)}`", highlight=False, markup=False,
                  soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("signal")(signal_run)
