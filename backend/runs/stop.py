"""Stop a run: every process proven the run's (SIGINT, SIGTERM, SIGKILL), or its SLURM job through the
scheduler, and mark it stopped. A run on another host is not signalled from here."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from backend.cluster.sky_jobs import SkyUnavailable, cancel
from backend.cluster.sky_jobs import job_id_of as sky_job_id_of
from backend.cluster.slurm_job import job_id_of
from backend.core.process_identity import run_marker
from backend.rundir.layout import FolderBusy, FolderNotWritable, RunFolder
from backend.rundir.process import terminate
from backend.runs.status import refresh


@dataclass
class StopResult:
    lines: list[str]
    stopped: bool  # a process or a SLURM job was signalled, or the run was over already


def stop_run(run: RunFolder, report: Callable[[str], None] = lambda _: None) -> list[str]:
    """Stop every process of the run (SIGINT, SIGTERM, SIGKILL) and mark it stopped. Only processes
    proven the run's are signalled; a run on another host is not signalled from here."""
    return stop_run_result(run, report).lines


def stop_run_result(run: RunFolder, report: Callable[[str], None] = lambda _: None) -> StopResult:
    """`stop_run`, saying also whether anything was stopped (the CLI's exit code)."""
    try:
        with run.control("stop"):
            return _stop_locked(run, report)
    except FolderBusy as err:
        return StopResult([str(err)], stopped=False)
    except FolderNotWritable as err:  # a read-only folder: its proven processes are still stopped
        return _stop_unwritable(run, str(err), report)


def _stop_unwritable(run: RunFolder, why: str, report: Callable[[str], None]) -> StopResult:
    state = refresh(run)
    if not state.is_active:
        return StopResult([f"run is already {state.status}; nothing to stop"], stopped=True)
    elsewhere = None if run.state_or_damaged().status == "damaged" else state.elsewhere()
    if elsewhere:
        return StopResult([why, f"run {run.run_id} was {elsewhere}: nothing was signalled from here"], stopped=False)
    done = terminate(run_marker(run.path), report=report)
    if not done:
        return StopResult([why, "no process of the run was alive: nothing was stopped"], stopped=False)
    return StopResult([*done, f"{why}; its state could not be marked stopped"], stopped=True)


def _stop_locked(run: RunFolder, report: Callable[[str], None]) -> StopResult:
    state = refresh(run)
    damaged = run.state_or_damaged().status == "damaged"
    if not state.is_active:
        return StopResult([f"run is already {state.status}; nothing to stop"], stopped=True)
    elsewhere = None if damaged else state.elsewhere()
    sky_job = sky_job_id_of(run.path)
    if sky_job is not None:
        return _cancel_sky_job(run, sky_job, damaged)
    job_id, job_problem = _slurm_job_id(run)
    if elsewhere and job_id is None:
        return StopResult([*job_problem, f"run {run.run_id} was {elsewhere}: nothing was signalled from here; stop "
                           f"it on {state.host} (`workbench stop {run.run_id}` there)"], stopped=False)
    if not damaged:
        run.update_state(status="stopping", stop_requested=True)
    slurm = _cancel_slurm_job(job_id) if job_id else StopResult(job_problem, stopped=False)
    if slurm.stopped:
        return slurm
    if elsewhere:  # the scheduler could not be asked: the run goes on as it was
        if not damaged:
            run.update_state(status=state.status, stop_requested=False)
        return StopResult([*slurm.lines, f"run {run.run_id} was {elsewhere}: nothing was signalled from here"],
                          stopped=False)
    done = terminate(run_marker(run.path), report=report) or ["no process of the run was alive"]
    if damaged:
        return StopResult(slurm.lines + done, stopped=True)
    deadline = time.monotonic() + 5
    marker = run_marker(run.path)
    while run.read_state().status == "stopping" and time.monotonic() < deadline and \
            marker.owns(state.supervisor_pid, state.supervisor_started):
        time.sleep(0.1)
    if run.read_state().status == "stopping":  # supervisor did not get to write it
        run.update_state(status="stopped", ended_at=time.time())
    return StopResult(slurm.lines + done, stopped=True)


def _slurm_job_id(run: RunFolder) -> tuple[str | None, list[str]]:
    """The SLURM job of a run exported to SLURM, or None and why not (backend/cluster/slurm_job.py)."""
    job_id, problems = job_id_of(run.path)
    return job_id, [f"{problem}: no SLURM job was cancelled" for problem in problems]


def _cancel_sky_job(run: RunFolder, job_id: str, damaged: bool) -> StopResult:
    """A run submitted to SkyPilot is stopped through SkyPilot (its processes are on the cloud's instances):
    the job is cancelled; its state says so once SkyPilot does (`workbench status` asks it)."""
    try:
        said = cancel(job_id)
    except SkyUnavailable as err:
        return StopResult([f"{err}: nothing was stopped"], stopped=False)
    if not damaged:
        run.update_state(status="stopping", stop_requested=True)
    return StopResult([said], stopped=True)


def _cancel_slurm_job(job_id: str) -> StopResult:
    """A run exported to SLURM is stopped through the scheduler (its processes are on other hosts)."""
    try:
        result = subprocess.run(["scancel", "--signal=INT", "--full", job_id], capture_output=True, text=True,
                                timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return StopResult([f"scancel {job_id} could not run ({err})"], stopped=False)
    if result.returncode != 0:
        return StopResult([f"scancel {job_id} failed: {result.stderr.strip()}"], stopped=False)
    return StopResult([f"sent SIGINT to SLURM job {job_id} (scancel); its supervisor records the end"], stopped=True)
