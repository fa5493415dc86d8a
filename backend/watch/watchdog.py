"""The watchdog: a thread in the run's supervisor that turns the events file and the process table
into alerts, outside the trainer, so it sees what the trainer cannot report (a hang, a SIGKILL).

    watchdog = start_watchdog(run, trainer_pid)   # after the launcher started
    ...                                           # supervisor waits for the launcher
    watchdog.finish()                             # after the final state is written

Nothing here may end or block the supervisor: every failure is written to <run>/watch/watch.log
and the watchdog carries on (or stops itself), and `finish` waits a bounded time.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from backend.contract.alerts import Alert, append_alert, final_kind
from backend.contract.events import Checkpoint, Event, EventReader, Log, RunBegin, decode_lines
from backend.contract.heartbeat import heartbeat_path
from backend.core.fs import write_text_atomic
from backend.core.process_identity import run_processes
from backend.core.safe_text import visible
from backend.core.units import duration
from backend.hang.watch_report import hang_report
from backend.rundir.diagnose import diagnose_log
from backend.rundir.layout import RunFolder, append_watch_log, watch_dir
from backend.rundir.process import signal_processes, terminate_run
from backend.watch import probes
from backend.watch.config import WatchSection
from backend.watch.detectors import event_detectors
from backend.watch.finding import Finding
from backend.watch.machine_detectors import DiskDetector, GpuMemoryDetector, HostMemoryDetector
from backend.watch.progress_detectors import HangDetector
from backend.watch.resume_detectors import ResumeDetector
from backend.watch.stacks import dump_stacks

SAMPLE_SECONDS = 10.0  # disk, host RAM and GPUs (a checkpoint triggers a disk reading at once)
STATUS_SECONDS = 30.0


class Watchdog:
    def __init__(self, run: RunFolder, trainer_pid: int | None, config: WatchSection, dispatcher: Any = None,
                 beside: Callable[[], bool] | None = None):
        self.run, self.trainer_pid, self.config, self.dispatcher = run, trainer_pid, config, dispatcher
        self.folder = watch_dir(run.path)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.reader = EventReader(run.events_path, offset=_size(run.events_path))
        self.detectors = event_detectors(config, beside)
        # a resume proves it carried on (#39): the tail of the earlier attempts, judged against the first steps
        self.resume = ResumeDetector(_logs_before(run.events_path, self.reader.offset), config.resume_logs,
                                     config.resume_loss_factor)
        self.detectors.append(self.resume)
        self.hang = HangDetector(config.hang_factor, config.hang_min_seconds)
        self.disk = DiskDetector(config.disk_margin)
        self.host = HostMemoryDetector(config.host_memory_min_fraction)
        self.gpu = GpuMemoryDetector(config.gpu_memory_fraction)
        self.gpu_reader: probes.GpuReader | None = None
        self.run_begin: RunBegin | None = None
        self.last_step: int | None = None
        self.stopped_by: Alert | None = None
        self.stop_at_checkpoint: Alert | None = None  # an overfit `stop`: done once the next checkpoint is saved
        self.raised: list[Alert] = []
        self._stop = threading.Event()
        self._close_timeout = 30.0  # the sinks' last deliveries: set by `finish`
        self._thread: threading.Thread | None = None
        self._next_sample = 0.0
        self._next_status = 0.0
        self._polls = 0
        self._cpu_seconds = 0.0
        self._started = time.time()

    # ------------------------------------------------------------ thread

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._loop, name="workbench-watchdog", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            cpu = time.thread_time()
            try:
                self.poll(time.time())
            except Exception:
                self.log_error("poll failed")
            self._cpu_seconds += time.thread_time() - cpu
            self._stop.wait(self.config.poll_seconds)
        self._final(self._close_timeout)

    def finish(self, timeout: float = 30.0) -> None:
        """The run has ended and its final state is written: last events, the final alert, the sinks'
        last deliveries (bounded by `timeout`). They are done by the watchdog's own thread once its
        current poll is over (one poller only: a second would skip events or alert twice); this waits
        for it a bounded time."""
        self._close_timeout = timeout
        self._stop.set()
        if self._thread is None:  # never started: nothing polls but this
            self._final(timeout)
            return
        self._thread.join(timeout=self.config.stop_grace_seconds * 2 + 10 + timeout)
        if self._thread.is_alive():
            append_watch_log(self.run.path, "the watchdog did not end in time; the final alert may be missing")

    def _final(self, timeout: float) -> None:
        try:
            self.poll(time.time(), ticks=False)
            self.raise_alert(self.final_finding())
        except Exception:
            self.log_error("final alert failed")
        if self.dispatcher is not None:
            self.dispatcher.close(timeout)
        if self.gpu_reader is not None:
            self.gpu_reader.close()
        self.write_status(final=True)

    # ------------------------------------------------------------ one poll

    def poll(self, now: float, ticks: bool = True) -> list[Alert | None]:
        raised: list[Alert | None] = []
        checkpointed = False
        for event in self.reader.read_new():
            saved = self._note(event, now)
            checkpointed |= saved
            if saved and self.stop_at_checkpoint is not None and self.stopped_by is None:
                self.stopped_by = self.stop_at_checkpoint
                self.stop_run(self.stop_at_checkpoint)
            for detector in self.detectors:
                raised += [self.raise_alert(f) for f in detector.on_event(event)]
        if self.resume.clean:  # a clean resume is said once, in the run's log
            _say_in_log(self.run, self.resume.clean)
            self.resume.clean = None
        if ticks:
            raised += [self.raise_alert(f) for f in self._hang(now)]
            if checkpointed or now >= self._next_sample:
                self._next_sample = now + SAMPLE_SECONDS
                raised += [self.raise_alert(f) for f in self.sample()]
            if now >= self._next_status:
                self._next_status = now + STATUS_SECONDS
                self.write_status()
        self._polls += 1
        return raised

    def _hang(self, now: float) -> list[Finding]:
        """A hang, unless the trainer shows life the events do not: its heartbeat (each step and
        evaluation batch) or files of the newest checkpoint still being written."""
        found = self.hang.on_tick(now)
        if not found:
            return []
        latest = self._latest_activity()
        if latest is not None and now - latest < found[0].evidence["limit_seconds"]:
            self.hang.note_progress(latest)
            return []
        return found

    def _latest_activity(self) -> float | None:
        times = []
        try:
            times.append(heartbeat_path(self.run.path).stat().st_mtime)
        except OSError:
            pass
        try:
            checkpoints = self.run.checkpoints()
            if checkpoints:
                times += [os.lstat(os.path.join(root, name)).st_mtime
                          for root, _dirs, files in os.walk(checkpoints[-1]) for name in files]
        except Exception:
            pass
        return max(times, default=None)

    def _note(self, event: Event, now: float) -> bool:
        self.hang.on_event(event, now)
        if event.rank != 0:
            return False
        if isinstance(event, RunBegin):
            self.run_begin = event
        step = getattr(event, "step", None)
        if step is not None:
            self.last_step = step
        return isinstance(event, Checkpoint)

    def sample(self) -> list[Finding]:
        found: list[Finding] = []
        try:
            output = self.run.output_dir
            forecast, basis = probes.checkpoint_forecast(self.run.checkpoints(), self.run_begin)
            found += self.disk.on_sample(probes.disk_free(output), forecast, str(output), self.last_step, basis)
        except Exception:
            self.log_error("disk reading failed")
        available, total = probes.host_memory()
        found += self.host.on_sample(available, total, self.last_step)
        if self.gpu_reader is None:
            self.gpu_reader = probes.GpuReader()
        found += self.gpu.on_sample(self.gpu_reader.read(), self.last_step)
        return found

    # ------------------------------------------------------------ alerts and actions

    def raise_alert(self, finding: Finding) -> Alert | None:
        action = self.config.actions.get(finding.kind, "alert")  # type: ignore[call-overload]
        if action == "off":
            return None
        evidence, message = dict(finding.evidence), finding.message
        if finding.kind == "hang":
            evidence.update(self._hang_evidence())
            message = f"{message}. {evidence['summary']}" if evidence.get("summary") else message
        alert = Alert(finding.kind, message, finding.step, evidence, action=action, run_id=self.run.run_id)
        append_alert(self.run.path, alert)
        self.raised.append(alert)
        if self.dispatcher is not None:
            self.dispatcher.submit(alert)
        if action == "stop" and finding.kind == "overfit":
            self.stop_at_checkpoint = self.stop_at_checkpoint or alert  # the evaluation's checkpoint comes next
        elif action == "stop" and self.stopped_by is None:
            self.stopped_by = alert
            self.stop_run(alert)
        return alert

    def _hang_evidence(self) -> dict[str, Any]:
        try:
            processes = run_processes(self.run.path, (self.trainer_pid,))
            stacks = dump_stacks(self.run.path, processes)
            found: dict[str, Any] = {"processes": probes.process_table(processes), "stacks": stacks}
        except Exception as err:
            self.log_error("stack dump failed")
            return {"stacks_error": str(err)}
        try:  # by rank, grouped, the lagging rank named, written into the run folder (#39)
            world = self.run_begin.world_size if self.run_begin else None
            return {**found, **hang_report(self.run, stacks, world, self.last_step)}
        except Exception:
            self.log_error("hang report failed")
            return found

    def stop_run(self, alert: Alert) -> None:
        """A clean stop: SIGINT (the trainer ends between steps), then SIGTERM, then SIGKILL; the
        checkpoints already written stay as they are. A stopped (SIGSTOP) process is continued
        first, or it could not act on anything but SIGKILL."""
        try:
            self.run.update_state(status="stopping", stop_requested=True)
            processes = run_processes(self.run.path, (self.trainer_pid,))
            frozen = [p for p in processes if _status(p) == psutil.STATUS_STOPPED]
            signal_processes(frozen, signal.SIGCONT)
            terminate_run(self.run.path, (self.trainer_pid,), grace_seconds=self.config.stop_grace_seconds)
        except Exception:
            self.log_error(f"stop after the {alert.kind} alert failed")

    def final_finding(self) -> Finding:
        state = self.run.read_state()
        status = final_kind(state.status)
        step = self.last_step
        checkpoints = [c for c in self.run.checkpoints() if (c / "trainer_state.json").is_file()]
        evidence: dict[str, Any] = {"status": state.status, "exit_code": state.exit_code, "signal": state.signal,
                                    "failure_reason": state.failure_reason,
                                    "last_checkpoint": str(checkpoints[-1]) if checkpoints else None}
        if status == "finished":
            took = f" in {duration(state.ended_at - state.started_at)}" if state.ended_at and state.started_at else ""
            return Finding("finished", f"finished at step {step}{took}", step, evidence)
        if status == "stopped":
            why = (f"stopped by the watchdog after the {self.stopped_by.kind} alert"
                   if self.stopped_by else "stopped on request")
            kept = f"; last checkpoint {checkpoints[-1].name}" if checkpoints else "; no complete checkpoint"
            evidence["stopped_by_alert"] = self.stopped_by.id if self.stopped_by else None
            return Finding("stopped", why + kept, step, evidence)
        diagnoses = diagnose_log(self.run.log_tail())
        if diagnoses:
            last = diagnoses[-1]
            evidence["diagnosis"] = {"kind": last.kind, "line": last.line, "suggestion": last.suggestion}
        reason = state.failure_reason or f"exited with code {state.exit_code}"
        if state.status != "failed":  # e.g. unknown: said as such, never dressed up as a known failure
            reason = f"ended with status {state.status}: {reason}"
        return Finding("failed", reason, step, evidence)

    # ------------------------------------------------------------ bookkeeping

    def write_status(self, final: bool = False) -> None:
        """<run>/watch/status.json: the watchdog's heartbeat and its own CPU use."""
        wall = time.time() - self._started
        status = {"pid": _pid(), "alive": not final, "time": time.time(), "polls": self._polls,
                  "wall_seconds": round(wall, 2), "cpu_seconds": round(self._cpu_seconds, 4),
                  "cpu_percent_of_one_core": round(100 * self._cpu_seconds / wall, 4) if wall > 0 else None,
                  "alerts": len(self.raised), "last_step": self.last_step}
        try:
            write_text_atomic(self.folder / "status.json", json.dumps(status, indent=2))
        except OSError:
            pass

    def log_error(self, what: str) -> None:
        append_watch_log(self.run.path, f"{what}\n{traceback.format_exc()}")


class _NoWatchdog:
    """What the supervisor gets when the watchdog is off or could not start."""

    def finish(self, timeout: float = 30.0) -> None:
        pass


def start_watchdog(run: RunFolder, trainer_pid: int | None,
                   beside: Callable[[], bool] | None = None) -> Watchdog | _NoWatchdog:
    """The supervisor's hook: a watchdog per the run's profile, or nothing (never an exception). `beside`:
    whether a job of the run's own (golden prompts, swift eval) runs beside it now."""
    try:
        profile = run.read_profile()
        if not profile.watch.enabled:
            return _NoWatchdog()
        from backend.watch.sinks import Dispatcher

        dispatcher = Dispatcher.for_run(run.path, profile.notify)
        return Watchdog(run, trainer_pid, profile.watch, dispatcher, beside).start()
    except Exception as error:
        append_watch_log(run.path, f"watchdog could not start\n{traceback.format_exc()}")
        _say_watchdog_off(run, error)
        return _NoWatchdog()


def _say_watchdog_off(run: RunFolder, error: Exception) -> None:
    """A run without its watchdog is said where the user looks (inbox, TUI, status line), never only in a log;
    written straight to alerts.jsonl since the sinks may be what failed."""
    reason = visible(f"{type(error).__name__}: {error}".splitlines()[0])
    message = (f"the watchdog could not start ({reason}): no hang, NaN or stop alert will fire for this run; "
               f"details in {watch_dir(run.path) / 'watch.log'}")
    try:
        append_alert(run.path, Alert(kind="watchdog", message=message, run_id=run.run_id))
    except OSError:
        pass


def _logs_before(path: Path, offset: int, window: int = 1 << 20) -> list[Log]:
    """Rank 0's log records of the earlier attempts: the last `window` bytes before `offset`, whole lines."""
    try:
        with open(path, "rb") as handle:
            start = max(0, offset - window)
            handle.seek(start)
            data = handle.read(offset - start)
    except OSError:
        return []
    if start > 0:
        data = data[data.find(b"\n") + 1:]
    return [e for e in decode_lines(data).events if isinstance(e, Log) and e.rank == 0]


def _say_in_log(run: RunFolder, text: str) -> None:
    """One line in the run's output.log (appended whole, like the trainer's lines), for `workbench logs`."""
    try:
        with open(run.log_path, "a+b") as log:
            ends_line = log.tell() == 0 or (log.seek(-1, os.SEEK_END) >= 0 and log.read(1) == b"\n")
            log.write((b"" if ends_line else b"\n") + f"[workbench] {text}\n".encode())  # not after a progress bar
    except OSError:
        append_watch_log(run.path, text)


def _size(path: Path) -> int:
    """Events of an earlier attempt (before a resume) are not this watchdog's to judge."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _status(proc: psutil.Process) -> str | None:
    try:
        return proc.status()
    except psutil.Error:
        return None


def _pid() -> int:
    return os.getpid()


