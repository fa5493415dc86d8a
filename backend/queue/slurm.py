"""On a cluster the queue is the cluster's (#25 step 6): `workbench queue add PROFILE... --slurm`.

Each run (a sweep's every combination) is exported by backend.launchers.slurm (its run folder and batch
script, as `workbench export slurm` writes them) and submitted with `sbatch --parsable`, each after the
one before it: `--dependency=afterany:<previous job id>` (the queue's last SLURM job still in squeue, then
each new one), so SLURM runs them in the queue's order. The job's memory request (`#SBATCH --mem`) is the
run's host RAM forecast plus the profile's `[queue] memory_margin`; its GPUs are the profile's
(nproc_per_node, CPU profiles none). The entries are recorded in the queue file with state "slurm" and
their job ids; the local keeper never starts them.

The list asks `squeue` (this user's jobs, every state SLURM still remembers) and says what it answers:
PENDING with its reason, RUNNING, COMPLETED ...; a job squeue no longer lists is "unknown" (finished,
cancelled or purged: squeue does not say which). `queue rm` on such an entry runs `scancel <its job id>`
and nothing else. No scheduling of its own across machines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import math
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from backend.cluster.slurm_job import JOB_ID
from backend.core.fs import file_lock
from backend.profile import LaunchProfile
from backend.queue.store import Entry, QueueFile, QueueRefused, edit, new_entry_id, queue_dir
from backend.queue.sweep import expand, sweep_of

SBATCH_TIMEOUT_S = 60.0
SQUEUE_TIMEOUT_S = 20.0
SUBMIT_LOCK_WAIT_S = 3600.0  # another `queue add --slurm` submitting: wait for it (its jobs come first)
RECORD_WAIT_S = 600.0  # a submitted job is recorded however long another command holds the queue
SQUEUE_FORMAT = "%i|%T|%r"
SQUEUE_EVERY_S = 10.0  # the Queue screen reloads every 2 s; squeue is asked at most this often (a shared controller)
_last_answer: tuple[float, dict[str, tuple[str, str]]] | None = None
MIB = 1024**2


class SlurmRefused(QueueRefused):
    """A SLURM command could not be run or refused (the message says which and why)."""


def tool(name: str) -> str:
    """The SLURM command's path; SlurmRefused when it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        raise SlurmRefused(f"--slurm: `{name}` is not on PATH, so SLURM is not reachable from this machine; run "
                           f"this on a SLURM login node, or queue without --slurm (the local queue keeper)")
    return path


def host_forecast_bytes(profile: LaunchProfile, base_dir: Path) -> int | None:
    """The run's host RAM peak per node, as the memory forecast says; None when it cannot say."""
    try:
        from backend.estimate.calibration import Calibration
        from backend.estimate.forecast import forecast_for_profile
        from backend.models.refs import resolve_model

        # the job runs on the cluster's nodes: this machine (a login node) neither is one nor measured one
        forecast = forecast_for_profile(profile, resolve_model(profile.model.source, base_dir), base_dir=base_dir,
                                        on_cpu=profile.distribution.device == "cpu", calibration=Calibration(off=True))
        value = forecast.get("host_total_bytes")
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    except Exception:  # noqa: BLE001 - no forecast: the job asks for the partition's default memory
        return None


def mem_request_mib(forecast: int | None, margin: float) -> int | None:
    return None if forecast is None else max(1, math.ceil(forecast * (1 + margin) / MIB))


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmRefused(f"`{' '.join(argv)}` did not answer in {timeout:.0f} s") from None
    except OSError as err:
        raise SlurmRefused(f"`{argv[0]}` could not be run: {err}") from None


def _said(result: subprocess.CompletedProcess[str]) -> str:
    text = (result.stderr or result.stdout or "").strip()
    return text.splitlines()[-1] if text else f"exit status {result.returncode}"


def submit_profiles(items: list[tuple[LaunchProfile, Path]], *, options: object | None = None,
                    folder: Path | None = None, workspace: Path | None = None) -> list[Entry]:
    """Export and submit each profile (a sweep's every combination), each after the one before; the entries
    recorded. Every run is validated against the allocation first (SlurmRefused naming each refused one,
    nothing submitted). SlurmRefused (after recording the ones submitted before it) when sbatch is missing or
    refuses (the run folder it was not given is removed again), or an export fails; SweepError for a bad
    sweep, before anything is submitted. The queue file is locked only to read and record: a submission of
    many jobs (sbatch may take a minute each) holds `slurm.lock`, so the local keeper never waits on it."""
    from backend.launchers.slurm import SlurmOptions

    base = options if isinstance(options, SlurmOptions) else SlurmOptions()
    sbatch = tool("sbatch")
    points = [(p, base_dir, tag) for profile, base_dir in items for tag in [sweep_of(profile)]
              for p in expand(profile)]
    _refuse_invalid(points, base)
    folder = folder or queue_dir()
    folder.mkdir(parents=True, exist_ok=True)
    added: list[Entry] = []
    with file_lock(folder / "slurm.lock", wait=SUBMIT_LOCK_WAIT_S):
        with edit(folder) as queue:
            previous = _last_live_job(queue)
        try:
            for profile, base_dir, tag in points:
                entry = _submit_one(sbatch, profile, base_dir, tag, base, previous, workspace)
                with edit(folder, wait=RECORD_WAIT_S) as queue:
                    queue.entries.append(entry)
                added.append(entry)
                previous = entry.slurm_job_id
        except SlurmRefused as err:
            done = f"; submitted before it: {', '.join(f'{e.name} (job {e.slurm_job_id})' for e in added)}" \
                if added else ""
            raise SlurmRefused(f"{err}{done}") from None
    return added


def _refuse_invalid(points: list[tuple[LaunchProfile, Path, Any]], base: Any) -> None:
    from backend.launch.validate import errors
    from backend.launchers.slurm import allocation_hardware, cluster_problems, gpus_per_node, job_profile

    refused = []
    for profile, base_dir, _ in points:
        hardware = allocation_hardware(gpus_per_node(profile, base))
        blocking = errors(cluster_problems(job_profile(profile, base), hardware, base_dir))
        if blocking:
            refused.append(f"{profile.name}: " + "; ".join(str(p) for p in blocking))
    if refused:
        raise SlurmRefused(f"not submitted ({len(refused)} of {len(points)} run(s) would be refused; nothing was "
                           "submitted):\n  " + "\n  ".join(refused))


def _submit_one(sbatch: str, profile: LaunchProfile, base_dir: Path, tag: tuple[str | None, str | None],
                base: Any, previous: str | None, workspace: Path | None) -> Entry:
    """Export one run and sbatch it; its entry. SlurmRefused when the export fails or sbatch refuses (its run
    folder, written just now by this process and given to no job, is removed again with its index line)."""
    from backend.launchers.slurm import device_note, export_slurm
    from backend.runs.errors import LaunchRefused

    forecast = host_forecast_bytes(profile, base_dir)
    job_options = dataclasses.replace(base, mem_mib=mem_request_mib(forecast, profile.queue.memory_margin))
    try:
        exported = export_slurm(profile, job_options, base_dir=base_dir, workspace=workspace)
    except (ValueError, FileExistsError) as err:
        raise SlurmRefused(f"{profile.name}: not exported: {err}") from None
    except LaunchRefused as err:
        raise SlurmRefused(f"{profile.name}: not exported: " + "; ".join(str(p) for p in err.problems)) from None
    argv = [sbatch, "--parsable", *([f"--dependency=afterany:{previous}"] if previous else []),
            str(exported.batch_script)]
    try:
        result = _run(argv, SBATCH_TIMEOUT_S)
    except SlurmRefused as err:  # sbatch did not answer: it may have queued the job, so its folder stays
        raise SlurmRefused(f"{profile.name}: {err}; its run folder {exported.run.path} stays (the job may be "
                           f"queued: `squeue --me`; if not, `workbench delete {exported.run.run_id}`)") from None
    job_id = result.stdout.strip().split(";")[0] if result.returncode == 0 else ""
    if not JOB_ID.fullmatch(job_id):
        _give_back(exported.run.path)
        raise SlurmRefused(f"{profile.name}: sbatch refused the job ({_said(result)}); its run folder was removed "
                           "again (nothing was submitted for it)")
    run = exported.run
    sweep, sweep_id = tag
    return Entry(id=new_entry_id(), name=profile.name, profile_file=str(run.profile_path), base_dir=str(base_dir),
                 state="slurm", started_at=time.time(), run_id=run.run_id, run_dir=str(run.path),
                 forecast_bytes=forecast, slurm_job_id=job_id, slurm_dependency=previous, sweep=sweep,
                 sweep_id=sweep_id, note=device_note(profile, base))


def _give_back(run_dir: Path) -> None:
    """Remove a run folder this process exported a moment ago and no job was given (never through a link)."""
    from backend.rundir import index

    with contextlib.suppress(OSError):
        index.forget(run_dir)
    if run_dir.is_dir() and not run_dir.is_symlink():
        shutil.rmtree(run_dir, ignore_errors=True)


def _last_live_job(queue: QueueFile) -> str | None:
    """The queue's last SLURM job that squeue still lists (a new job goes after it); None when there is none.
    When squeue cannot answer, the last one recorded (sbatch then says whether it still knows it)."""
    jobs = [e.slurm_job_id for e in queue.entries if e.state == "slurm" and e.slurm_job_id]
    if not jobs:
        return None
    try:
        states = job_states(fresh=True)
    except SlurmRefused:
        return jobs[-1]
    live = [j for j in jobs if j in states and states[j][0] in ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED",
                                                                "REQUEUED", "REQUEUE_HOLD", "RESIZING")]
    return live[-1] if live else None


def job_states(fresh: bool = False) -> dict[str, tuple[str, str]]:
    """This user's jobs as squeue lists them (every state it still remembers): job id -> (state, reason); an
    answer under SQUEUE_EVERY_S old is used again unless `fresh`. SlurmRefused when squeue is not on PATH or
    fails."""
    global _last_answer
    if not fresh and _last_answer is not None and time.monotonic() - _last_answer[0] < SQUEUE_EVERY_S:
        return _last_answer[1]
    squeue = shutil.which("squeue")
    if squeue is None:
        raise SlurmRefused("squeue is not on PATH")
    result = _run([squeue, "--noheader", f"--format={SQUEUE_FORMAT}", "--states=all", f"--user={getpass.getuser()}"],
                  SQUEUE_TIMEOUT_S)
    if result.returncode != 0:
        raise SlurmRefused(f"squeue failed: {_said(result)}")
    states = {}
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[0]:
            states[parts[0]] = (parts[1], parts[2])
    _last_answer = (time.monotonic(), states)
    return states


def describe(entry: Entry, states: dict[str, tuple[str, str]] | str) -> str:
    """The list's line of a SLURM entry from squeue's answer (`states`, or why squeue could not answer)."""
    job = f"SLURM job {entry.slurm_job_id}"
    if isinstance(states, str):
        return f"{job}: unknown ({states})"
    found = states.get(entry.slurm_job_id or "")
    if found is None:
        return (f"{job}: unknown (no longer in squeue: finished, cancelled or purged; its run: "
                f"`workbench status {entry.run_id}`)")
    state, reason = found
    if state == "PENDING":
        return f"{job}: PENDING ({reason})" if reason and reason != "None" else f"{job}: PENDING"
    if state == "RUNNING":
        return f"{job}: RUNNING as {entry.run_id}"
    return f"{job}: {state}" + (f" ({reason})" if reason and reason != "None" else "")


def cancel(entry: Entry) -> str:
    """`scancel -- <its job id>` (that job only); what was done, said. A run the job never started (still
    `starting`, no supervisor) is recorded `stopped` so that it can be deleted. SlurmRefused when scancel is
    missing or fails for a job SLURM still knows."""
    said = cancel_job(str(entry.slurm_job_id))
    if entry.run_dir:
        said += _never_started(Path(entry.run_dir), str(entry.slurm_job_id))
    return said


def _never_started(run_dir: Path, job_id: str) -> str:
    from backend.rundir.layout import RunFolder

    run = RunFolder(run_dir)
    try:
        with run.control("cancel"):
            state = run.read_state()
            if state.status != "starting" or state.supervisor_pid is not None:
                return ""
            run.update_state(status="stopped", ended_at=time.time(),
                             failure_reason=f"SLURM job {job_id} cancelled before it started")
    except Exception:  # noqa: BLE001 - a folder that cannot be read or locked stays as it is, and is said
        return f"; its run folder {run_dir} could not be marked stopped"
    return f"; run {run.run_id} never started: marked stopped"


def cancel_job(job_id: str) -> str:
    """`scancel <job_id>` (that job only); what was done, said. SlurmRefused when scancel is missing or fails
    for a job SLURM still knows."""
    if not JOB_ID.fullmatch(job_id):
        raise SlurmRefused(f"{job_id!r} is not a SLURM job id: nothing was cancelled")
    scancel = shutil.which("scancel")
    if scancel is None:
        raise SlurmRefused(f"scancel is not on PATH: SLURM job {job_id} cannot be cancelled from here (the entry "
                           f"stays); run this on a SLURM login node")
    result = _run([scancel, "--", job_id], SQUEUE_TIMEOUT_S)  # `--`: the id is never an option
    if result.returncode != 0:
        said = _said(result)
        if re.search(r"invalid job id|already completed|has already finished", said, re.IGNORECASE):
            return f"SLURM job {job_id} was over already ({said})"
        raise SlurmRefused(f"scancel {job_id} failed: {said} (the entry stays)")
    return f"SLURM job {job_id} cancelled (scancel {job_id})"
