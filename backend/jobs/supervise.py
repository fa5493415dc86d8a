"""A job's part in the one supervisor (backend/rundir/supervise.py): `python -m backend.cli.supervise job JOB_DIR`.

The supervisor runs the job's argv with output to the job's log and records how it ended; then the
kind's finishing step runs (merge: move the new model from its temporary folder into place;
inference: publish the results file; export: move the exported files into place). After a failure or a stop the kind cleans up (a merge's
temporary folder is removed; an inference keeps its partial results). Stdlib + pydantic only.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

from backend.core.process_identity import job_marker, start_time_of
from backend.jobs.job import JobFolder, JobSpec
from backend.rundir.diagnose import describe_exit
from backend.rundir.supervise import Command

Finisher = Callable[[JobSpec, Any], "str | None"]
FINISHERS: dict[type, Finisher] = {}


def register_finisher(data_type: type, finisher: Finisher) -> None:
    """A job kind's finishing step, by the type of its finishing data (registered at start-up by
    backend.cli.wiring: merge, batch inference, export, eval)."""
    FINISHERS[data_type] = finisher


def finish(spec: JobSpec) -> str | None:
    """The kind's finishing step, typed by its finishing data (a spec without any has nothing to do)."""
    data = spec.finish
    if data is None:
        return None
    finisher = FINISHERS.get(type(data))
    if finisher is None:
        raise RuntimeError(f"no finishing step is registered for a {type(data).__name__} job")
    return finisher(spec, data)


def discard(spec: JobSpec) -> None:
    """What a failed or stopped job left, removed by its kind (its finishing data knows how)."""
    if spec.finish is not None:
        spec.finish.discard()


class JobKept:
    """A job, as the supervisor keeps it."""

    def __init__(self, job: JobFolder):
        self.job, self.marker = job, job_marker(job.path)
        self.spec = job.read_spec()

    def record_keeper(self, **identity: object) -> bool:
        return self.job.update_state(**identity).stop_requested

    def command(self) -> Command:
        return Command(self.spec.argv, self.spec.cwd, self.spec.env)

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.job.update_state(status="running", child_pid=child.pid, child_started=start_time_of(child.pid))

    def ended(self, code: int | None, stopped: bool, why_not_started: str | None = None) -> None:
        """Write how the job ended; finish its result, or discard what a failed or stopped job left."""
        stop_requested = stopped or self.job.read_state().stop_requested
        reason: str | None
        if why_not_started:
            status, reason, sig = "failed", why_not_started, None
        else:
            status, reason, sig = describe_exit(-15 if code is None else code, self.job.log_tail(),
                                                stop_requested=stop_requested)
        result = None
        if status == "finished":
            try:
                result = finish(self.spec)
            except Exception as err:  # anything that stops the result landing is the job's failure
                status, reason = "failed", str(err)
        if status != "finished":
            discard(self.spec)
        print(f"workbench: job {status}" + (f": {reason}" if reason else "") + (f"; {result}" if result else ""),
              flush=True)
        self.job.update_state(status=status, exit_code=code, signal=sig, failure_reason=reason, result=result,
                              stop_requested=stop_requested, ended_at=time.time())
