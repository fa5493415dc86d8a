"""Alerts from the command line: `inbox`, `watch RUN --until finished|alert`, and `status --line`
(served before Typer by backend/cli/__init__.py, so it stays under 100 ms)."""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from backend.cli.common import console, fail, find_run_or_exit

# `workbench watch` exit codes, one per outcome
EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_STOPPED = 3
EXIT_ALERT = 4
EXIT_TIMEOUT = 5
EXIT_CODES = {"finished": EXIT_FINISHED, "failed": EXIT_FAILED, "stopped": EXIT_STOPPED}


class Until(str, Enum):
    finished = "finished"
    alert = "alert"


def inbox(
    show_all: Annotated[bool, typer.Option("--all", help="Also show alerts seen before.")] = False,
    peek: Annotated[bool, typer.Option("--peek", help="Show, but leave them unseen.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One alert JSON object a line.")] = False,
) -> None:
    """What happened since you last looked, across all runs (and mark it seen)."""
    from backend.watch.inbox import save_seen, unseen

    items, marks = unseen(include_seen=show_all)
    for item in items:
        if as_json:
            said = {"damaged": item.damaged} if item.damaged is not None else item.alert
            print(json.dumps({**said, "run_dir": str(item.run_dir)}))
        else:
            console.print(item.line, markup=False, highlight=False, soft_wrap=True)
    if not items and not as_json:
        console.print("nothing new", highlight=False)
    if not peek:
        try:
            save_seen(marks)
        except OSError as err:  # a read-only or full data dir: said in one line, the alerts stay unseen
            fail(f"could not mark these seen: {err}", code=1)


def watch(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    until: Annotated[Until, typer.Option("--until", help="finished: until the run ends; alert: until the first "
                                         "new alert (or the end).")] = Until.finished,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.")] = None,
    bell: Annotated[bool, typer.Option("--bell", help="Ring the terminal bell for each alert.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print each alert as JSON.")] = False,
) -> None:
    """Wait for a run and print its alerts; the exit code says how it went (for scripts and CI):
    0 finished, 1 failed, 3 stopped, 4 an alert (with --until alert), 5 timed out, 2 bad input."""
    from backend.contract.alerts import AlertReader
    from backend.runs.status import refresh

    folder = find_run_or_exit(run_ref)
    reader = AlertReader(folder.path, from_end=True)
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        for alert in reader.read_new():
            _show(alert, as_json, bell)
            if alert.kind in EXIT_CODES:
                raise typer.Exit(EXIT_CODES[alert.kind])
            if until is Until.alert:
                raise typer.Exit(EXIT_ALERT)
        state = refresh(folder)
        if not state.is_active:
            for alert in _last_alerts(reader, folder.path, state.started_at):
                _show(alert, as_json, bell)
            if not as_json:
                reason = f": {state.failure_reason}" if state.failure_reason else ""
                console.print(f"run {folder.run_id} {state.status}{reason}", markup=False, highlight=False)
            raise typer.Exit(EXIT_CODES.get(state.status, EXIT_FAILED))
        if deadline is not None and time.monotonic() > deadline:
            console.print(f"still {state.status} after {timeout:g} s", highlight=False)
            raise typer.Exit(EXIT_TIMEOUT)
        time.sleep(1.0)


def _last_alerts(reader, run_dir: Path, since: float | None, wait: float = 10.0) -> list:  # noqa: ANN001
    """The supervisor writes the final alert a moment after the final state: wait for it, until
    the watchdog says it is done (a run without a watchdog has none, hence the bound). A run that
    ended before `reader` opened has its final alert (of this attempt: not before `since`) earlier
    in the file."""
    from backend.contract.alerts import AlertReader
    from backend.watch.inbox import read_json

    found = []
    end = time.monotonic() + wait
    while time.monotonic() < end:
        found += reader.read_new()
        done = (read_json(run_dir / "watch" / "status.json") or {}).get("alive") is False
        if done or any(a.kind in EXIT_CODES for a in found):
            break
        time.sleep(0.2)
    found += reader.read_new()
    if not any(a.kind in EXIT_CODES for a in found):
        earlier = [a for a in AlertReader(run_dir).read_new() if a.kind in EXIT_CODES and a.time >= (since or 0)]
        found = earlier[-1:] + found
    return found


def _show(alert, as_json: bool, bell: bool) -> None:  # noqa: ANN001 - an Alert
    if as_json:
        print(json.dumps(alert.to_json()), flush=True)
    else:
        console.print(alert.line(), markup=False, highlight=False, soft_wrap=True)
    if bell:
        sys.stdout.write("\a")
        sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("inbox")(inbox)
    app.command("watch")(watch)
