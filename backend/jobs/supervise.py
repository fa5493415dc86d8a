"""The keeper of one job: `python -m backend.jobs.supervise JOB_DIR`.

It runs the job's argv with output to the job's log, records how it ended, and then runs the
kind's finishing step (merge: move the new model from its temporary folder into place).
After a failure or a stop the kind cleans up (a merge's temporary folder is removed; an
inference keeps its partial results). SIGTERM to the job's process group stops it.
Stdlib + pydantic only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from backend.jobs.job import JobFolder, JobSpec
from backend.runs.diagnose import describe_exit
from backend.runs.process import current_boot_id, start_time_of, this_host


def _finishers() -> dict[str, tuple[Callable[[JobSpec], str], Callable[[JobSpec], None]]]:
    from backend.jobs import batch_infer, merge

    return {"merge": (merge.finish_merge, merge.discard_merge),
            "infer": (batch_infer.finish_infer, batch_infer.discard_infer)}


def finish(spec: JobSpec) -> str:
    return _finishers()[spec.kind][0](spec)


def discard(spec: JobSpec) -> None:
    _finishers()[spec.kind][1](spec)


def supervise(job: JobFolder) -> int:
    spec = job.read_spec()
    job.update_state(host=this_host(), boot_id=current_boot_id(), supervisor_pid=os.getpid(),
                     supervisor_started=start_time_of(os.getpid()))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child: subprocess.Popen[bytes] | None = None
    stopping = threading.Event()

    def forward_term(signum: int, _frame: object) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward_term)
    if job.read_state().stop_requested:  # stopped before it began
        return _record(job, spec, None)
    child = subprocess.Popen(spec.argv, cwd=spec.cwd, env={**os.environ, **spec.env}, stdin=subprocess.DEVNULL,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if stopping.is_set() and child.poll() is None:  # the signal came while the child was being started
        child.terminate()
    job.update_state(status="running", child_pid=child.pid, child_started=start_time_of(child.pid))
    return _record(job, spec, child.wait(), stopping.is_set())


def _record(job: JobFolder, spec: JobSpec, code: int | None, stopped: bool = True) -> int:
    """Write how the job ended; finish its result, or discard what a failed or stopped job left."""
    stop_requested = stopped or job.read_state().stop_requested
    status, reason, sig = describe_exit(-15 if code is None else code, job.log_tail(), stop_requested=stop_requested)
    result = None
    if status == "finished":
        try:
            result = finish(spec)
        except Exception as err:  # anything that stops the result landing is the job's failure
            status, reason = "failed", str(err)
    if status != "finished":
        discard(spec)
    print(f"workbench: job {status}" + (f": {reason}" if reason else "") + (f"; {result}" if result else ""),
          flush=True)
    job.update_state(status=status, exit_code=code, signal=sig, failure_reason=reason, result=result,
                     stop_requested=stop_requested, ended_at=time.time())
    return 0


def main() -> None:
    sys.exit(supervise(JobFolder(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
