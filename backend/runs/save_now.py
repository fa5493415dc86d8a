"""`workbench save RUN` and the monitor's save key (#27): ask the running trainer for a checkpoint now
(backend/contract/save_request.py's request file) and wait, bounded, until it is written."""

from __future__ import annotations

import time
from dataclasses import dataclass

from backend.contract.events import Checkpoint, EventReader, RunEnd
from backend.contract.save_request import (
    SAVE_NOW,
    RequestBlocked,
    clear_save_request,
    read_save_request,
    write_save_request,
)
from backend.rundir.layout import RunFolder
from backend.runs.errors import RunRefused
from backend.runs.status import refresh


@dataclass(frozen=True)
class SaveOutcome:
    """What came of a request: the checkpoint written (None: none yet) and what to say."""

    checkpoint: str | None
    lines: list[str]


def ask_for_checkpoint(run: RunFolder, stop: bool = False, timeout: float = 120.0, poll: float = 0.2) -> SaveOutcome:
    """Ask the running trainer of `run` (a RunFolder) to save at the end of its step (and then stop, with
    `stop`); wait at most `timeout` s for the checkpoint. ValueError (errors.RunRefused) when the run is
    not running."""
    state = refresh(run)
    if state.status not in ("running", "starting"):
        raise RunRefused(f"run {run.run_id} is {state.status}: only a running run can save a checkpoint now"
                         + ("; `workbench resume` starts it again from its last checkpoint"
                            if state.status in ("stopped", "failed", "unknown") else ""))
    try:
        offset = run.events_path.stat().st_size
    except OSError:
        offset = 0
    try:
        request = write_save_request(run.path, "stop" if stop else "save",
                                     SAVE_NOW if not stop else "workbench save --stop")
    except RequestBlocked as err:
        raise RunRefused(f"cannot ask run {run.run_id} for a checkpoint: {err}") from None
    except OSError as err:
        raise RunRefused(f"cannot ask run {run.run_id} for a checkpoint: writing {err.filename or 'save.request'} "
                         f"failed ({err.strerror or err})") from None
    reader = EventReader(run.events_path, offset)
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        for event in reader.read_new():
            if isinstance(event, Checkpoint) and event.rank == 0 and event.requested is not None:
                return SaveOutcome(event.path, [f"saved {event.path} at step {event.step} ({event.requested})"])
            if isinstance(event, RunEnd) and event.rank == 0:
                return SaveOutcome(None, [f"the run ended ({event.status}) before it saved the checkpoint asked for"])
        if time.monotonic() >= deadline:
            break
        if not refresh(run).is_active:
            clear_save_request(run.path)
            return SaveOutcome(None, [f"run {run.run_id} ended before it saved the checkpoint asked for"])
        time.sleep(poll)
    pending = read_save_request(run.path)
    if pending is not None and pending.id == request.id:
        return SaveOutcome(None, [f"no checkpoint yet after {timeout:g} s: the trainer has not reached the end of a "
                                  "step (it is loading, or a step is long); the request stays and is taken at the "
                                  f"end of its next step (see `workbench logs {run.run_id}`)"])
    return SaveOutcome(None, [f"the trainer took the request but no checkpoint came within {timeout:g} s (a large "
                              "model saves slowly); its events say when it is written"])
