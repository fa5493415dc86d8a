"""Which processes are a run's or a job's: the proof of identity, read without acting.

A pid alone proves nothing: after a crash or a reboot the number is given to another process, and a
copied or hand-edited state.json names any pid at all. A process counts as the run's (alive, or to
be signalled) only when

- the record was made on this host and in this boot of it (host name and kernel boot id),
- the process with that pid started when the recorded one did (psutil create time), and
- its environment carries the run's marker (its own folder's path).

A process found by scanning counts only by its marker. This module only reads (the system monitor
sits below the run package and asks it for a run's processes); backend.rundir.process starts and
signals them.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

RUN_MARKER_ENV = "WORKBENCH_RUN_DIR"
JOB_MARKER_ENV = "WORKBENCH_JOB_DIR"
# create times are computed from the boot time, which the kernel may shift a little (NTP)
START_TIME_TOLERANCE_SECONDS = 1.0


def this_host() -> str:
    return socket.gethostname()


@functools.cache
def current_boot_id() -> str:
    """The kernel's id of this boot (Linux), else the boot time: changes with every reboot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return f"boot-{int(psutil.boot_time())}"


def start_time_of(pid: int | None) -> float | None:
    """When the process `pid` started (unix seconds), or None when there is no such process."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, OverflowError):
        return None


def elsewhere(host: str | None, boot_id: str | None) -> str | None:
    """Why processes recorded on `host` in boot `boot_id` cannot be signalled from here (another host,
    an earlier boot of this one), or None. `boot_id` None: an older record, the boot is not checked."""
    if host is not None and host != this_host():
        return f"started on host {host!r}, not on this one ({this_host()!r})"
    if boot_id is not None and boot_id != current_boot_id():
        return f"recorded before this machine ({this_host()}) last rebooted"
    return None


def keeper_gone(marker: Marker, host: str | None, boot_id: str | None, pid: object, started: object) -> bool:
    """Whether the recorded keeper (a supervisor) is proven gone: recorded here before a reboot, or
    no process with its pid and start time carries `marker`. False where it cannot be proven: another
    host, no pid recorded yet, or a process of that start time whose environment is not ours to read."""
    if host is not None and host != this_host():
        return False
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if boot_id is not None and boot_id != current_boot_id():
        return True  # every process of an earlier boot is gone, its pid is another's now
    recorded = started if isinstance(started, (int, float)) and not isinstance(started, bool) else None
    return marker.gone(pid, recorded)


@dataclass(frozen=True)
class Marker:
    """The environment variable every process of one run (or job) carries, and its value."""

    env: str
    value: str

    def carried_by(self, proc: psutil.Process) -> bool:
        try:
            return proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(self.env) == self.value
        except psutil.Error:  # gone, or not ours to read (another user's): not ours to signal either
            return False

    def owns(self, pid: int | None, started: float | None) -> psutil.Process | None:
        """The process `pid` if it is provably the recorded one: same start time, carries the marker."""
        if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
            return None
        try:
            proc = psutil.Process(pid)
            if started is None or abs(proc.create_time() - started) > START_TIME_TOLERANCE_SECONDS:
                return None
        except (psutil.Error, ValueError, OverflowError):
            return None
        return proc if self.carried_by(proc) else None

    def gone(self, pid: int, started: float | None) -> bool:
        """Proven not the recorded process: no such pid, another start time, or its environment
        (readable) lacks the marker. `started` None (not recorded): the marker alone decides."""
        try:
            proc = psutil.Process(pid)
            if started is not None and abs(proc.create_time() - started) > START_TIME_TOLERANCE_SECONDS:
                return True
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
            return proc.environ().get(self.env) != self.value
        except psutil.NoSuchProcess:
            return True
        except (psutil.Error, ValueError, OverflowError):  # not ours to read: not provable
            return False

    def processes(self) -> list[psutil.Process]:
        """Every live process on this host that carries the marker (never this process)."""
        me = os.getpid()
        found = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid != me and self.carried_by(proc):
                found.append(proc)
        return found


def marked_folders(env: str = RUN_MARKER_ENV) -> set[str]:
    """The folders named by the marker `env` of every live process on this host (never this one), in
    one scan: for a caller that asks about many runs at once (the runs list), where `processes()` of
    each run's marker is one scan of every process's environment a run. `run_marker(d).value in
    marked_folders()` says what `run_marker(d).processes()` being non-empty says."""
    me = os.getpid()
    found: set[str] = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            value = proc.environ().get(env) if proc.pid != me and proc.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:  # gone, or not ours to read: not ours to count either
            continue
        if value:
            found.add(value)
    return found


def run_marker(run_dir: str | Path) -> Marker:
    return Marker(RUN_MARKER_ENV, str(Path(run_dir).resolve()))


def job_marker(job_dir: str | Path) -> Marker:
    return Marker(JOB_MARKER_ENV, str(Path(job_dir).resolve()))


def run_processes(run_dir: Path, extra_pids: tuple[int | None, ...] = ()) -> list[psutil.Process]:
    """Live processes of a run on this host: those whose environment carries its marker.

    `extra_pids` are hints only (kept for callers that know pids): a pid counts only if the
    process carries the marker, so a reused or planted pid is never returned."""
    marker = run_marker(run_dir)
    found = {proc.pid: proc for proc in marker.processes()}
    for pid in extra_pids:
        if isinstance(pid, int) and pid > 0 and pid not in found and pid != os.getpid():
            try:
                proc = psutil.Process(pid)
            except (psutil.Error, ValueError, OverflowError):
                continue
            if marker.carried_by(proc):
                found[pid] = proc
    return list(found.values())
