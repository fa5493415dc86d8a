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

import dataclasses
import getpass
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

from backend.profile import LaunchProfile
from backend.queue.store import Entry, QueueFile, QueueRefused, edit, new_entry_id
from backend.queue.sweep import expand, sweep_of

SBATCH_TIMEOUT_S = 60.0
SQUEUE_TIMEOUT_S = 20.0
JOB_ID = re.compile(r"\d+(_\d+)?")
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
        from backend.estimate.forecast import forecast_for_profile
        from backend.models.refs import resolve_model

        forecast = forecast_for_profile(profile, resolve_model(profile.model.source, base_dir), base_dir=base_dir)
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
    recorded. SlurmRefused (after recording the ones submitted before it) when sbatch is missing or refuses,
    or an export fails; SweepError for a bad sweep, before anything is submitted."""
    from backend.launchers.slurm import SlurmOptions, export_slurm
    from backend.runs.errors import LaunchRefused

    base = options if isinstance(options, SlurmOptions) else SlurmOptions()
    sbatch = tool("sbatch")
    expanded = [(p, base_dir, tag) for profile, base_dir in items for tag in [sweep_of(profile)]
                for p in expand(profile)]
    added: list[Entry] = []
    failure: str | None = None
    with edit(folder) as queue:
        previous = _last_live_job(queue)
        for profile, base_dir, (sweep, sweep_id) in expanded:
            forecast = host_forecast_bytes(profile, base_dir)
            job_options = dataclasses.replace(base, mem_mib=mem_request_mib(forecast, profile.queue.memory_margin))
            try:
                exported = export_slurm(profile, job_options, base_dir=base_dir, workspace=workspace)
            except (ValueError, FileExistsError) as err:
                failure = f"{profile.name}: not exported: {err}"
                break
            except LaunchRefused as err:
                failure = f"{profile.name}: not exported: " + "; ".join(str(p) for p in err.problems)
                break
            argv = [sbatch, "--parsable", *([f"--dependency=afterany:{previous}"] if previous else []),
                    str(exported.batch_script)]
            result = _run(argv, SBATCH_TIMEOUT_S)
            job_id = result.stdout.strip().split(";")[0] if result.returncode == 0 else ""
            if not JOB_ID.fullmatch(job_id):
                failure = (f"{profile.name}: sbatch refused the job ({_said(result)}); its run folder "
                           f"{exported.run.path} was written but not submitted (delete it with `workbench delete "
                           f"{exported.run.run_id}`)")
                break
            run = exported.run
            entry = Entry(id=new_entry_id(), name=profile.name, profile_file=str(run.profile_path),
                          base_dir=str(base_dir), state="slurm", started_at=time.time(), run_id=run.run_id,
                          run_dir=str(run.path), forecast_bytes=forecast, slurm_job_id=job_id,
                          slurm_dependency=previous, sweep=sweep, sweep_id=sweep_id)
            queue.entries.append(entry)
            added.append(entry)
            previous = job_id
    if failure is not None:
        done = f"; submitted before it: {', '.join(f'{e.name} (job {e.slurm_job_id})' for e in added)}" if added \
            else ""
        raise SlurmRefused(failure + done)
    return added


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


def cancel(job_id: str) -> str:
    """`scancel <job_id>` (that job only); what was done, said. SlurmRefused when scancel is missing or fails
    for a job SLURM still knows."""
    scancel = shutil.which("scancel")
    if scancel is None:
        raise SlurmRefused(f"scancel is not on PATH: SLURM job {job_id} cannot be cancelled from here (the entry "
                           f"stays); run this on a SLURM login node")
    result = _run([scancel, job_id], SQUEUE_TIMEOUT_S)
    if result.returncode != 0:
        said = _said(result)
        if re.search(r"invalid job id|already completed|has already finished", said, re.IGNORECASE):
            return f"SLURM job {job_id} was over already ({said})"
        raise SlurmRefused(f"scancel {job_id} failed: {said} (the entry stays)")
    return f"SLURM job {job_id} cancelled (scancel {job_id})"
