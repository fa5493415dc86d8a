"""The keeper of one job: `python -m backend.jobs.supervise JOB_DIR`.

It runs the job's argv with output to the job's log, records how it ended, and then runs the
kind's finishing step (merge: move the new model from its temporary folder into place).
A job that fails or is stopped has its partial output discarded. Stdlib + pydantic only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from backend.jobs.job import JobFolder, JobSpec
from backend.runs.diagnose import describe_exit


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
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child: subprocess.Popen[bytes] | None = None

    def forward_term(signum: int, _frame: object) -> None:
        job.update_state(stop_requested=True)
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward_term)
    child = subprocess.Popen(spec.argv, cwd=spec.cwd, env={**os.environ, **spec.env},
                             stdin=subprocess.DEVNULL,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    job.update_state(status="running", child_pid=child.pid)
    code = child.wait()
    stop_requested = job.read_state().stop_requested
    status, reason, sig = describe_exit(code, job.log_tail(), stop_requested=stop_requested)
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
                     ended_at=time.time())
    return 0


def main() -> None:
    sys.exit(supervise(JobFolder(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
