"""The run's supervisor: session leader of a run, parent of the launcher, keeper of state.json.

`python -m backend.runs.supervise RUN_DIR` reads the argv from command.json, starts it,
waits, and records how it ended (exit code, signal, reason from the log). It ignores
SIGHUP and SIGINT, so only `workbench stop` (which signals every process of the run) or the
end of training ends it. No torch in this process (numpy, for the events summary, at most).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from typing import TYPE_CHECKING

from backend.runs.layout import RunFolder
from backend.runs.process import current_boot_id, run_processes, signal_processes, start_time_of, this_host
from backend.runs.verdict import judge_exit
from backend.watch.watchdog import append_watch_log, start_watchdog

if TYPE_CHECKING:
    from backend.series_summary import KeeperThread


def supervise(run: RunFolder) -> int:
    command = run.read_command()
    state = run.read_state()
    # who keeps this run, proven later by pid + start time + marker (on a SLURM node: that node)
    run.update_state(host=this_host(), boot_id=current_boot_id(), supervisor_pid=os.getpid(),
                     supervisor_started=start_time_of(os.getpid()))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM to the supervisor alone is passed on to the launcher, which ends its workers
    child: subprocess.Popen[bytes] | None = None

    def forward_term(signum: int, _frame: object) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward_term)
    child = subprocess.Popen(command["argv"], cwd=command.get("cwd") or str(run.path), stdin=subprocess.DEVNULL,
                             # the launcher gets default signal handling back
                             preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL),
                                                 signal.signal(signal.SIGHUP, signal.SIG_IGN)))
    run.update_state(status="running", trainer_pid=child.pid, trainer_started=start_time_of(child.pid),
                     started_at=state.started_at or time.time())
    watchdog = start_watchdog(run, child.pid)  # alerts from outside the trainer (#15)
    summary = _start_summary(run)  # so that a monitor opens a long run without reading it all
    code = child.wait()
    _wait_for_stragglers(run)
    final = run.read_state()
    status, reason, sig = judge_exit(run, code, stop_requested=final.stop_requested)
    run.update_state(status=status, exit_code=code, signal=sig, failure_reason=reason, ended_at=time.time())
    watchdog.finish()
    if summary is not None:
        summary.finish()
    return 0


def _start_summary(run: RunFolder) -> KeeperThread | None:
    """The events summary's keeper thread (backend.series_summary), or None if it cannot start."""
    try:
        from backend.series_summary import KeeperThread

        return KeeperThread(run.events_path, lambda text: append_watch_log(run.path, text)).start()
    except Exception:
        append_watch_log(run.path, f"events summary keeper could not start\n{traceback.format_exc()}")
        return None


def _wait_for_stragglers(run: RunFolder, timeout: float = 30.0) -> None:
    """The launcher can exit a moment before its workers (torch elastic puts them in sessions of
    their own): the final status is written only once no process of the run is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not run_processes(run.path):
            return
        time.sleep(0.2)
    signal_processes(run_processes(run.path), signal.SIGKILL)


def main() -> None:
    sys.exit(supervise(RunFolder(sys.argv[1])))


if __name__ == "__main__":
    main()
