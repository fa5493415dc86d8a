"""The queue keeper: one detached process per data dir that starts queued runs as memory and
`max_parallel` allow, records each run's id in its entry, and moves on when a run ends.

Started on demand (`ensure_keeper`: by `workbench queue add`, and by any later workbench command while
entries wait and no keeper is alive, so after a reboot it is back at the next command), in a new session
like a run's supervisor (backend.rundir.process.start_detached), carrying the marker
WORKBENCH_QUEUE_DIR=<queue folder>. One keeper a data dir: it holds `keeper.lock` (backend.core.fs) while it
lives; a second one exits at once. `keeper.json` records its pid, start time, host and boot, and a
process counts as the keeper only when backend.core.process_identity proves it (start time + marker).
The keeper exits when no entry is waiting or running (paused ones wait for `queue resume`).

Nothing is run twice: an entry is marked `starting` before its launch and gets its run id right after;
a keeper killed in between leaves `starting`, and the next keeper adopts the run of that name created
since (else it starts it again: it never started). Runs are started by backend.runs.start.start_run
(the path of `workbench run --detach`) and watched through status.refresh (the one reconciler).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from backend.core.fs import LockTimeout, file_lock, write_text_atomic
from backend.core.process_identity import Marker, current_boot_id, elsewhere, this_host
from backend.profile import ProfileError, load_profile, save_profile
from backend.queue.admission import pick_gpus, why_waiting
from backend.queue.retry import oom_retry_profile
from backend.queue.store import (
    Entry,
    QueueDamaged,
    QueueFile,
    edit,
    insert_by_priority,
    new_entry_id,
    queue_dir,
)
from backend.runs.attempts import record_retry

KEEPER_MARKER_ENV = "WORKBENCH_QUEUE_DIR"
POLL_S = 1.0
KEEPER_LOCK_WAIT_S = 15.0  # a keeper that is just exiting lets go of the lock in well under this
EVENTS_HEAD_BYTES = 1 << 20  # the first step's log line comes early: run_begin and a few phases before it
RECORD_WAIT_S = 600.0  # a launch's outcome is written down however long another command holds the queue


def keeper_marker(folder: Path) -> Marker:
    return Marker(KEEPER_MARKER_ENV, str(folder.resolve()))


def keeper_record_path(folder: Path) -> Path:
    return folder / "keeper.json"


def keeper_pid(folder: Path | None = None) -> int | None:
    """The live keeper's pid, proven (recorded pid, start time and marker), or None."""
    folder = folder or queue_dir()
    try:
        record = json.loads(keeper_record_path(folder).read_text(encoding="utf-8"))
        pid, started = record["pid"], record["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if elsewhere(record.get("host"), record.get("boot_id")):
        return None
    proc = keeper_marker(folder).owns(pid, started)
    return proc.pid if proc is not None else None


def _write_record(folder: Path, pid: int, started: float | None) -> None:
    write_text_atomic(keeper_record_path(folder), json.dumps(
        {"pid": pid, "started": started, "host": this_host(), "boot_id": current_boot_id()}))


def ensure_keeper(folder: Path | None = None) -> int | None:
    """Start the keeper when entries are pending and none is alive; its pid (or the live one's), or
    None when nothing is queued. Cheap when there is no queue file."""
    folder = folder or queue_dir()
    if not (folder / "queue.json").exists():
        return None
    from backend.rundir.process import start_detached

    with edit(folder) as queue:
        if not queue.keeps_keeper():
            return None
        alive = keeper_pid(folder)
        if alive is not None:
            return alive
        marker = keeper_marker(folder)
        pid, started = start_detached([sys.executable, "-m", "backend.queue.keeper", str(folder.resolve())],
                                      {marker.env: marker.value}, Path.cwd(), folder / "keeper.log")
        _write_record(folder, pid, started)
        return pid


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", flush=True)


# ---------------------------------------------------------------- one pass


def _run_folder(entry: Entry) -> Any:
    from backend.rundir.layout import RunFolder

    return RunFolder(entry.run_dir) if entry.run_dir else None


def _is_oom(state: Any, run: Any) -> bool:
    from backend.core.tail import last_lines
    from backend.rundir.diagnose import diagnose_log

    if state.failure_reason and "out of memory" in state.failure_reason.lower() and "cuda" in \
            state.failure_reason.lower():
        return True
    return any(d.kind == "oom" for d in diagnose_log(last_lines(run.log_path, 65_536).text))


def _watch_running(queue: QueueFile, entry: Entry) -> None:
    from backend.runs.status import refresh

    run = _run_folder(entry)
    state = refresh(run)
    if state.is_active:
        entry.peaked = entry.peaked or _stepped(run)
        return
    profile = _profile_or_none(entry)
    if state.status == "unknown" and profile is not None and profile.run.auto_resume \
            and elsewhere(state.host, state.boot_id) and entry.resumes < profile.run.auto_resume_max:
        _auto_resume(entry, run, profile.run.auto_resume_max)
        return
    entry.state, entry.outcome, entry.reason, entry.ended_at = "done", state.status, state.failure_reason, time.time()
    _log(f"{entry.id} {entry.run_id}: {state.status}")
    if state.status == "failed" and profile is not None and _is_oom(state, run):
        _queue_oom_retry(queue, entry, profile, run)


def _stepped(run: Any) -> bool:
    """Whether the run logged a training step: its model, optimizer and first batch are in memory by then."""
    from backend.contract.events import Log, decode_line

    try:
        with open(run.events_path, "rb") as handle:
            head = handle.read(EVENTS_HEAD_BYTES)
    except OSError:
        return False
    if len(head) >= EVENTS_HEAD_BYTES:  # that many events: it has been training a while
        return True
    return any(isinstance(decode_line(line), Log) for line in head.split(b"\n") if line.strip())


def _auto_resume(entry: Entry, run: Any, most: int) -> None:
    from backend.contract.alerts import Alert, append_alert
    from backend.runs.errors import RunRefused
    from backend.runs.resume import resume_run

    entry.resumes += 1
    try:
        resume_run(run, report=_log)
        message = f"cut by a reboot; resumed by the queue keeper (automatic resume {entry.resumes} of {most})"
    except RunRefused as err:
        entry.state, entry.outcome, entry.ended_at = "done", "unknown", time.time()
        entry.reason = message = f"cut by a reboot; automatic resume refused: {err}"
    append_alert(run.path, Alert(kind="watchdog", message=message, run_id=run.run_id))
    _log(f"{entry.id} {entry.run_id}: {message}")


def _queue_oom_retry(queue: QueueFile, entry: Entry, profile: Any, run: Any) -> None:
    retries = entry.attempt - 1
    if retries >= profile.queue.oom_retry:
        if profile.queue.oom_retry:
            entry.note = f"{entry.note + '; ' if entry.note else ''}CUDA out of memory again: oom_retry " \
                         f"{profile.queue.oom_retry} used up"
        return
    checkpoints = run.complete_checkpoints()
    changed = oom_retry_profile(profile, str(checkpoints[-1]) if checkpoints else None, attempt=entry.attempt + 1)
    if changed is None:
        entry.note = "CUDA out of memory: not retried (micro-batch 1 and gradient checkpointing already on)"
        return
    new_profile, note = changed
    retry = Entry(id=new_entry_id(), name=entry.name, profile_file="", base_dir=entry.base_dir,
                  priority=entry.priority, gpus=entry.gpus, attempt=entry.attempt + 1, parent=entry.id, note=note,
                  sweep=entry.sweep, sweep_id=entry.sweep_id,
                  resume_from=str(checkpoints[-1]) if checkpoints else None)
    retry.profile_file = str(Path(entry.profile_file).with_name(f"{retry.id}.toml"))
    save_profile(new_profile, retry.profile_file)
    insert_by_priority(queue, retry, after=entry)
    _log(f"{entry.id} failed by CUDA out of memory: queued {retry.id} (attempt {retry.attempt}): {note}")


def _profile_or_none(entry: Entry) -> Any:
    try:
        return load_profile(entry.profile_file)
    except (ProfileError, OSError):
        return None


def _adopt_or_retry(queue: QueueFile, entry: Entry) -> None:
    """An entry left `starting` by a keeper killed mid-launch: the run of its name made since its start
    and claimed by no other entry, else waiting again (it never started)."""
    from backend.rundir import index

    since = (entry.started_at or 0) - 1
    claimed = {str(Path(e.run_dir).resolve()) for e in queue.entries if e.run_dir}
    for run in index.known_runs():
        try:
            state = run.read_state()
        except Exception:  # noqa: BLE001 - a damaged folder is not this entry's run
            continue
        if state.profile_name == entry.name and state.created_at >= since and str(run.path) not in claimed:
            entry.state, entry.run_id, entry.run_dir = "running", run.run_id, str(run.path)
            _log(f"{entry.id}: adopted run {run.run_id} started by a keeper that died")
            return
    entry.state, entry.started_at = "waiting", None


def _admit(queue: QueueFile) -> Entry | None:
    """The entry to start now (marked `starting`), or None; each waiting entry's forecast filled in."""
    waiting = [e for e in queue.entries if e.state == "waiting"]
    if not waiting:
        return None
    head = waiting[0]
    profile = _profile_or_none(head)
    if profile is None:
        head.state, head.outcome, head.ended_at = "done", "refused", time.time()
        head.reason = f"the queued profile {head.profile_file} cannot be read"
        return None
    if head.forecast_bytes is None:
        head.forecast_bytes = forecast_bytes(profile, Path(head.base_dir))
    gpus = _gpu_free() if profile.distribution.device != "cpu" else {}
    reason = why_waiting(queue, head, max_parallel=profile.queue.max_parallel, margin=profile.queue.memory_margin,
                         free_bytes=None if gpus else psutil.virtual_memory().available)
    if reason is None and gpus:
        busy = {i for e in queue.entries if e.state in ("running", "starting") for i in (e.gpu_ids or [])}
        chosen, reason = pick_gpus(gpus, busy, head.gpus, profile.distribution.nproc_per_node, head.forecast_bytes,
                                   profile.queue.memory_margin, profile.queue.share_gpus)
        if chosen is not None:
            head.gpu_ids = chosen
            distribution = profile.distribution.model_copy(update={"gpu_ids": chosen})
            save_profile(profile.model_copy(update={"distribution": distribution}), head.profile_file)
    head.waiting_for = reason if gpus else None  # the GPU reading, for the list (the CLI reads no NVML)
    if reason is not None:
        return None
    head.state, head.started_at = "starting", time.time()
    return head


def forecast_bytes(profile: Any, base_dir: Path) -> int | None:
    """The run's host peak forecast (CPU runs; on a GPU box the per-GPU peak), or None when unknown."""
    try:
        from backend.estimate.forecast import forecast_for_profile
        from backend.models.refs import resolve_model

        forecast = forecast_for_profile(profile, resolve_model(profile.model.source, base_dir), base_dir=base_dir)
        key = "host_total_bytes" if profile.distribution.device == "cpu" or not _has_gpu() else \
            "per_device_total_bytes"
        value = forecast.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    except Exception:  # noqa: BLE001 - a forecast never blocks the queue: admitted by max_parallel then
        return None


def _has_gpu() -> bool:
    from backend.hardware.machine import detect_hardware

    return detect_hardware().has_cuda


def _gpu_free() -> dict[int, int | None]:
    """Each GPU's free memory now (NVML, other processes counted); {} on a machine without GPUs."""
    from backend.hardware.machine import query_hardware

    return query_hardware().free_memory()


def _launch(folder: Path, entry: Entry) -> None:
    from backend.runs.errors import LaunchRefused
    from backend.runs.start import start_run

    profile = _profile_or_none(entry)
    try:
        if profile is None:
            raise LaunchRefused([])
        run = start_run(profile, base_dir=Path(entry.base_dir))
    except LaunchRefused as err:
        _refused(folder, entry, "; ".join(str(p) for p in err.problems) or "its profile cannot be read")
        return
    except Exception as err:  # noqa: BLE001 - any launch error ends this entry, never the keeper (the rest wait)
        _log(traceback.format_exc().rstrip())
        _refused(folder, entry, f"the launch failed: {type(err).__name__}: {err}")
        return
    with edit(folder, wait=RECORD_WAIT_S) as queue:
        mine = queue.find(entry.id)
        mine.state, mine.run_id, mine.run_dir = "running", run.run_id, str(run.path)
        parent = next((e for e in queue.entries if e.id == mine.parent), None) if mine.parent else None
    if entry.attempt > 1:  # an OOM retry: linked in both run folders (the runs list and the scoreboard say it)
        record_retry(str(run.path), run.run_id, entry.attempt, entry.note, parent.run_dir if parent else None,
                     parent.run_id if parent else None)
    _log(f"{entry.id}: started run {run.run_id}")


def _refused(folder: Path, entry: Entry, reason: str) -> None:
    """The entry is done, `refused`, with why (the list shows it); the keeper goes on with the next."""
    with edit(folder, wait=RECORD_WAIT_S) as queue:
        mine = queue.find(entry.id)
        mine.state, mine.outcome, mine.ended_at, mine.reason = "done", "refused", time.time(), reason
    _log(f"{entry.id}: launch refused: {reason}")


def step(folder: Path, first: bool = False) -> bool:
    """One pass: watch running entries, queue retries, start the next one. False when nothing is pending."""
    with edit(folder) as queue:
        for entry in list(queue.entries):
            if entry.state == "running":
                _watch_running(queue, entry)
            elif entry.state == "starting" and first:
                _adopt_or_retry(queue, entry)
        start = _admit(queue)
        if start is None and not queue.keeps_keeper():
            keeper_record_path(folder).unlink(missing_ok=True)  # under the queue lock: `add` starts a new one
            return False
    if start is not None:
        _launch(folder, start)
    return True


def main(folder: Path) -> int:
    marker = keeper_marker(folder)
    os.environ.pop(marker.env, None)  # the runs it starts are not the keeper (proof stays in /proc)
    try:
        with file_lock(folder / "keeper.lock", wait=KEEPER_LOCK_WAIT_S):
            _keep(folder)
    except LockTimeout:  # the keeper lock only: _keep waits out a busy queue lock
        _log("another keeper holds the lock: this one exits")
    return 0


def _keep(folder: Path) -> None:
    _write_record(folder, os.getpid(), psutil.Process().create_time())
    _log(f"keeper {os.getpid()} started for {folder}")
    first = True  # until a pass went through: an entry left `starting` is adopted or started again
    while True:
        try:
            if not step(folder, first):
                break
            first = False
        except QueueDamaged as err:
            _log(f"queue file damaged: {err}")
        except LockTimeout:  # `queue add --slurm` or another command holds the queue: look again
            _log("the queue file is busy (another command holds its lock): looking again")
        time.sleep(POLL_S)
    _log("queue empty: keeper exits")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
