"""A job's part in the one supervisor (backend/runs/supervise.py): `python -m backend.jobs.supervise JOB_DIR`.

The supervisor runs the job's argv with output to the job's log and records how it ended; then the
kind's finishing step runs (merge: move the new model from its temporary folder into place;
inference: publish the results file; export: move the exported files into place). After a failure or a stop the kind cleans up (a merge's
temporary folder is removed; an inference keeps its partial results). Stdlib + pydantic only.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from backend.jobs.job import EvalFinish, ExportFinish, InferFinish, JobFolder, JobSpec, MergeFinish
from backend.runs.diagnose import describe_exit
from backend.runs.process import job_marker, start_time_of
from backend.runs.supervise import Command, supervise


def finish(spec: JobSpec) -> str | None:
    """The kind's finishing step, typed by its finishing data (a spec without any has nothing to do)."""
    data = spec.finish
    if isinstance(data, MergeFinish):
        from backend.jobs.merge import finish_merge

        return finish_merge(spec, data)
    if isinstance(data, InferFinish):
        from backend.jobs.batch_infer import finish_infer

        return finish_infer(data)
    if isinstance(data, ExportFinish):
        from backend.jobs.export_model import finish_export

        return finish_export(data)
    if isinstance(data, EvalFinish):
        from backend.jobs.evaluate import finish_eval

        return finish_eval(data)
    return None


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


def main() -> None:
    sys.exit(supervise(JobKept(JobFolder(Path(sys.argv[1])))))


if __name__ == "__main__":
    main()
