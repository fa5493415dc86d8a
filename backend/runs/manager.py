"""Start, look at, stop, resume, list and delete runs. The CLI and the TUI both call this.

Status is reconciled whenever someone looks, from evidence only (see verdict.py): a run
whose processes are all gone without a final status is concluded from its events and
checkpoints, else shown as `unknown`. Start, stop, resume and delete hold the run's
controller lock across their check and their act; processes are signalled only when
proven the run's (process.py); only proven run folders are deleted.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from backend.command import LaunchPlan, build_launch
from backend.data_files import hostile_dataset
from backend.events import EventReader, Log, RunEnd
from backend.fs import write_text_atomic
from backend.hardware import HardwareInfo, detect_hardware
from backend.paths import is_builtin
from backend.profile import LaunchProfile, save_profile
from backend.refs import local_path, resolve_model
from backend.runs import index
from backend.runs.checkpoints import choose_resume_checkpoint
from backend.runs.layout import (
    RESUMABLE_STATUSES,
    FolderBusy,
    FolderNotWritable,
    RunFolder,
    RunState,
    StateUnreadable,
    new_run_id,
    workspace_dir,
)
from backend.runs.outputs import claim_output_dir, output_dir_problem, release_output_dir
from backend.runs.process import run_marker, start_detached, supervisor_argv, terminate
from backend.runs.reconcile import reconcile
from backend.runs.save import clear_save_request
from backend.runs.verdict import judge_lost
from backend.runs.world import World, changed_files, read_world, what_changes, world_differences, world_of, write_world
from backend.units import size
from backend.validate import Problem, errors, validate

MIN_REF_CHARS = 4  # a shorter part of an id matches too much to act on
MAX_REF_CHARS = 1024


class LaunchRefused(Exception):
    """The profile has errors; nothing was started and nothing was written."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class RunNotFound(LookupError):
    pass


class RunRefused(ValueError):
    """The action was not done, with the reason (not that run's state, not a run folder, busy...)."""


# ---------------------------------------------------------------- start


def _hostile_datasets(profile: LaunchProfile, base_dir: Path | None) -> Iterator[Problem]:
    """A local dataset with a line too long or a row nested too deep refuses the launch before anything
    starts (swift's reader would take gigabytes or die by SIGSEGV): validate's check, which reads the data
    only when swift is asked too."""
    for key in ("train", "val"):
        for ref in getattr(profile.data, key):
            path_part = ref.partition("#")[0]
            if is_builtin(ref) or not path_part:
                continue
            problem = hostile_dataset([str(local_path(path_part, base_dir).absolute())])
            if problem:
                yield Problem(f"data.{key}", "error", f"{problem}.", "Split or flatten that row, or leave it out.")


def start_run(
    profile: LaunchProfile,
    *,
    base_dir: Path | None = None,
    workspace: Path | None = None,
    hardware: HardwareInfo | None = None,
) -> RunFolder:
    """Validate, write the run folder, start the supervisor detached. Returns at once."""
    hardware = hardware or detect_hardware()
    blocking = errors(validate(profile, hardware, base_dir=base_dir)) or list(_hostile_datasets(profile, base_dir))
    if blocking:
        raise LaunchRefused(blocking)
    if is_builtin(profile.model.source):
        resolve_model(profile.model.source, base_dir, build=True)
    try:
        run = RunFolder.create(workspace or workspace_dir(), new_run_id(profile.name))
    except FolderNotWritable as err:
        raise LaunchRefused([Problem("workspace", "error", str(err), "Free space or choose a writable "
                                     "--workspace (WORKBENCH_WORKSPACE).")]) from None
    claimed: Path | None = None
    try:
        with run.control("start"):
            plan = build_launch(profile, run.path, hardware, base_dir=base_dir)
            write_run_files(run, profile, plan, base_dir=base_dir)
            problems = launch_problems(run, plan)
            if problems:
                raise LaunchRefused(problems)
            try:
                claim_output_dir(plan.output_dir, run.path)
            except FileExistsError as err:
                raise LaunchRefused([Problem("output.output_dir", "error", str(err), "Choose another folder.")]) \
                    from None
            claimed = plan.output_dir
            index.register(run.path)
            _start_supervisor(run, plan)
    except BaseException as err:
        if not _started(run):
            _release(run, claimed)
        if isinstance(err, OSError):
            raise LaunchRefused([Problem("workspace", "error", f"cannot write the run folder {run.path}: "
                                         f"{err.strerror or err}", "Free space or choose a writable workspace.")
                                 ]) from None
        raise
    return run


def _release(run: RunFolder, claimed: Path | None) -> None:
    """A launch that failed gives back all it took: the output folder's claim, the index line and the
    run folder, so nothing half-made is left behind and the output folder is free again."""
    if claimed is not None:
        with contextlib.suppress(OSError):
            release_output_dir(claimed, run.path)
    with contextlib.suppress(OSError):
        index.forget(run.path)
    shutil.rmtree(run.path, ignore_errors=True)


def _started(run: RunFolder) -> bool:
    try:
        return run.read_state().supervisor_pid is not None
    except StateUnreadable:
        return False


# ---------------------------------------------------------------- disk and output folder


def launch_problems(run: RunFolder, plan: LaunchPlan) -> list[Problem]:
    """What the run folder and output_dir must allow before anything is written: the output_dir
    is empty or new, and the disk has room for the first checkpoint."""
    problems = []
    taken = output_dir_problem(plan.output_dir, run.path)
    if taken:
        problems.append(Problem("output.output_dir", "error", taken, "Choose an empty or new folder, or leave "
                                "output_dir empty to write inside the run folder."))
    need = first_checkpoint_bytes(run, plan)
    free = _free_bytes(plan.output_dir)
    if free is not None and need is not None and free < need:
        problems.append(Problem("output.output_dir", "error",
                                f"{size(free)} free on the disk of {plan.output_dir}; the first checkpoint needs "
                                f"about {size(need)}.", "Free space there or choose another output_dir."))
    return problems


def first_checkpoint_bytes(run: RunFolder, plan: LaunchPlan) -> int | None:
    """Forecast of one checkpoint from the memory forecast: the trainable weights in fp32 and AdamW's
    two moments (12 bytes a trainable parameter; a LoRA saves only the adapter), 10% margin.
    None when the forecast has no parameter count."""
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
        trainable = forecast["parameters"]["trainable"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(trainable, bool) or not isinstance(trainable, (int, float)) or not math.isfinite(trainable) \
            or trainable < 0:
        return None
    return int(trainable * 12 * 1.1)


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        if folder.is_dir():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def write_run_files(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan, base_dir: Path | None = None) -> None:
    run.write_identity()  # a folder made by another path (SLURM export) is a proven run folder too
    save_profile(profile, run.profile_path)
    plan.write_configs()
    command = {"argv": plan.argv, "env": plan.redacted_env(), "cwd": plan.cwd, "output_dir": str(plan.output_dir),
               "shell": plan.shell_line()}
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    run.write_state(run.new_state(profile.name))
    write_world(run.world_path, profile_world(profile), plan.argv, base_dir)
    _write_forecast(run, profile, plan, base_dir)


def profile_world(profile: LaunchProfile) -> World:
    """The world shape a profile asks for (world.json records it at launch; a resume compares)."""
    d, t = profile.distribution, profile.training
    return world_of(d.num_machines, d.nproc_per_node, t.per_device_train_batch_size, t.gradient_accumulation_steps)


def _write_forecast(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan, base_dir: Path | None) -> None:
    """Store the memory planner's forecast beside the run (predicted vs measured later). `base_dir`
    (the profile's folder) resolves its data, whose longest row sizes an unset max_length."""
    model_dir = plan.argv[plan.argv.index("--model") + 1]
    try:
        from backend.estimate.forecast import forecast_for_profile

        # model_dir: a folder, or a hub id refs resolves
        forecast: dict[str, Any] = forecast_for_profile(profile, model_dir, base_dir=base_dir)
    except Exception as err:  # a forecast must never stop a launch
        forecast = {"error": f"no forecast: {err}"}
    write_text_atomic(run.forecast_path, json.dumps(forecast, indent=2))


def _start_supervisor(run: RunFolder, plan: LaunchPlan) -> None:
    env = {**plan.env, run_marker(run.path).env: run_marker(run.path).value}
    pid, started = start_detached(supervisor_argv(run.path), env, run.path, run.log_path)
    _record_supervisor(run, pid, started)


def _record_supervisor(run: RunFolder, pid: int, started: float | None) -> None:
    """Record the supervisor unless it has already recorded itself (it may be that quick)."""
    with contextlib.suppress(StateUnreadable):
        state = run.read_state()
        if state.supervisor_pid == pid:
            return
    run.update_state(supervisor_pid=pid, supervisor_started=started, pgid=pid, started_at=time.time())


# ---------------------------------------------------------------- look


def refresh(run: RunFolder) -> RunState:
    """The run's state, reconciled with its processes and, once they are gone, with the evidence.
    Never raises for a damaged folder: the state then says `damaged` and why."""
    state = run.state_or_damaged()
    if state.status == "damaged":
        if run_marker(run.path).processes():  # state.json lost mid-run: the run still goes on
            return state.model_copy(update={"status": "running", "failure_reason": (
                f"{state.failure_reason}; its processes are still running (`workbench stop` stops them)")})
        return state
    return reconcile(run.state_or_damaged, run_marker(run.path), lambda lost: _conclude_lost(run, lost), state)


def _conclude_lost(run: RunFolder, state: RunState) -> RunState:
    """The supervisor and every process of the run are gone without a final status: conclude from
    the evidence (verdict.judge_lost), say it once in the run's alerts, and record it."""
    status, reason, sig = judge_lost(run, state)
    ended_at, when = _evidence_end(run)
    if when and reason:
        reason = f"{reason}; {when}"
    concluded = {"status": status, "failure_reason": reason, "signal": sig, "ended_at": ended_at}
    if not run.is_proven():  # a legacy or foreign folder (no run.json): shown as concluded, never written to
        return state.model_copy(update=concluded)
    _alert_supervisor_gone(run, status, reason)
    try:
        return run.update_state(**concluded)
    except (StateUnreadable, FolderNotWritable, FolderBusy):  # shown as concluded, written next time
        return state.model_copy(update=concluded)


def _evidence_end(run: RunFolder) -> tuple[float, str | None]:
    """When a run concluded from evidence ended: its `run_end` event's time; without one, its last
    event's (said so: the run was alive then and gone later); without any event, now. Never the moment
    someone looked, which can be hours after the end."""
    events = EventReader.from_end(run.events_path, 65_536).read_new()
    end = next((e for e in reversed(events) if isinstance(e, RunEnd) and e.rank == 0 and e.time > 0), None)
    if end is not None:
        return end.time, None
    last = next((e for e in reversed(events) if e.time > 0), None)
    if last is None:
        return time.time(), None
    return last.time, "its end is taken as its last event's time (it ended then or later)"


def _alert_supervisor_gone(run: RunFolder, status: str, reason: str | None) -> None:
    """The run's final alert when its supervisor (and watchdog) died before raising one: written once,
    by whichever workbench process concluded the run, so the inbox and the monitor still hear how it
    ended. Not sent to the profile's webhooks or commands: that is the watchdog's, which is gone."""
    from backend.watch.alerts import FINAL_KINDS, Alert, append_alert_once, final_kind, read_alerts

    try:
        if any(alert.kind in FINAL_KINDS for alert in read_alerts(run.path)):
            return  # the watchdog said it before it went
        kind = final_kind(status)
        said = reason or status
        message = f"the run's supervisor is gone; {said}" if status != "unknown" else f"ended with status unknown: {said}"
        last = last_log_event(run)
        append_alert_once(run.path, "supervisor-gone", Alert(
            kind, message, last.step if last else None, {"status": status, "failure_reason": reason,
                                            "concluded_by": "workbench (the supervisor left no record)"},
            run_id=run.run_id))
    except OSError:
        pass  # a read-only or damaged folder: the state still says how it ended


def _check_ref(ref: str) -> str:
    if not ref or not ref.strip():
        raise RunNotFound("an empty run reference matches no run; give a run id from `workbench runs`")
    if len(ref) > MAX_REF_CHARS:
        raise RunNotFound(f"a run reference of {len(ref):,} characters matches no run (ids are short); "
                          "`workbench runs` lists them")
    if "\0" in ref:
        raise RunNotFound("a run reference cannot contain a NUL character")
    return ref


def find_run(ref: str, strict: bool = False) -> RunFolder:
    """A run by folder path, full id, or unique id prefix (or, unless `strict`, unique part of an id)
    of at least MIN_REF_CHARS characters. `strict` (delete): the folder must be a proven run folder."""
    ref = _check_ref(ref)
    path = Path(ref).expanduser()
    if "/" in ref or ref in (".", "..") or _is_dir(path) and RunFolder(path).exists():
        if not _is_dir(path):
            raise RunNotFound(f"{ref!r} is not a run folder" + (" (it is a file)" if _is_file(path) else ""))
        folder = RunFolder(path)
        problem = folder.identity_problem()
        if problem and (strict or not folder.exists()):
            raise RunNotFound(problem)
        return folder
    folders = index.known_folders()
    exact = [f for f in folders if f.name == ref]
    if not exact and len(ref) < MIN_REF_CHARS:
        raise RunNotFound(f"{ref!r} is too short to pick a run: give the full id or at least {MIN_REF_CHARS} "
                          "characters of its start (`workbench runs` lists them)")
    matches = exact or [f for f in folders if f.name.startswith(ref)]
    if not matches and not strict:
        matches = [f for f in folders if ref in f.name]
    if len(matches) == 1:
        folder = RunFolder(matches[0])
        problem = folder.identity_problem() if strict else None
        if problem:
            raise RunNotFound(problem)
        return folder
    if not matches:
        how = "no run id is or starts with" if strict else "no run matches"
        raise RunNotFound(f"{how} {ref!r}; `workbench runs` lists them")
    names = ", ".join(sorted(m.name for m in matches)[:5])
    raise RunNotFound(f"{ref!r} matches several runs ({names}); give more of the id")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def list_runs() -> list[RunFolder]:
    """Every run, active ones first, then newest first. A damaged one is listed, never fatal."""
    runs = index.known_runs()
    states = {run.path: refresh(run) for run in runs}
    return sorted(runs, key=lambda r: (not states[r.path].is_active, -states[r.path].created_at))


@dataclass
class RunSummary:
    run: RunFolder
    state: RunState
    step: int | None
    max_steps: int | None
    loss: float | None
    loss_scale: float | None
    elapsed_seconds: float | None
    eta_seconds: float | None


def summarize(run: RunFolder, state: RunState | None = None) -> RunSummary:
    """The run's list line. `state`: the run's state when the caller reconciled it already (the
    runs list checks damaged folders against one process scan for all of them)."""
    state = refresh(run) if state is None else state
    last = last_log_event(run)
    step = last.step if last else None
    max_steps = last.max_steps if last else None
    end = state.ended_at or time.time()
    elapsed = end - state.started_at if state.started_at else None
    eta = None
    speed = last.steps_per_second if last else None
    if state.is_active and step and max_steps and speed:
        eta = (max_steps - step) / speed
    return RunSummary(run, state, step, max_steps, last.loss if last else None, last.loss_scale if last else None,
                      elapsed, eta)


def last_log_event(run: RunFolder, tail_bytes: int = 65_536) -> Log | None:
    """The newest rank-0 `log` event (with the final step of a `run_end` after it), read from the file's
    tail only. Lines that are not events (damaged, of a newer format) are skipped."""
    events = [e for e in EventReader.from_end(run.events_path, tail_bytes).read_new() if e.rank == 0]
    last_log = next((e for e in reversed(events) if isinstance(e, Log) and e.step is not None), None)
    end = next((e for e in reversed(events) if isinstance(e, RunEnd) and e.step is not None), None)
    if end is None:
        return last_log
    if last_log is None:  # the end alone: its step, its counts
        return Log(step=end.step, max_steps=end.max_steps, loss_scale=end.loss_scale,
                   overflow_count=end.overflow_count, skipped_steps=end.skipped_steps, time=end.time)
    return msgspec.structs.replace(last_log, step=end.step)  # the end has the final step; the log the last loss


# ---------------------------------------------------------------- stop / resume / delete


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


SLURM_JOB_ID = re.compile(r"\d+(_\d+)?")


def _slurm_job_id(run: RunFolder) -> tuple[str | None, list[str]]:
    """The SLURM job of a run exported to SLURM, or None and why not (nothing when there is no job file).
    The file lies in the run folder, which may come from a shared filesystem: only a job id is believed."""
    job_file = run.path / "slurm_job.json"
    if not job_file.is_file():
        return None, []
    try:
        content = json.loads(job_file.read_text(encoding="utf-8"))
        job_id = content.get("SLURM_JOB_ID") if isinstance(content, dict) else None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, [f"{job_file.name} is unreadable ({err}): no SLURM job was cancelled"]
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    if not isinstance(job_id, str) or not SLURM_JOB_ID.fullmatch(job_id):
        return None, [f"{job_file.name} holds no SLURM job id (SLURM_JOB_ID = {job_id!r}): no SLURM job was cancelled"]
    return job_id, []


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


def resume_run(run: RunFolder, *, allow_world_change: bool = False,
               report: Callable[[str], None] = lambda _: None) -> RunFolder:
    """Start a stopped or failed run again in its folder from its newest complete checkpoint; the
    step count carries on. `report` hears (and the run's log keeps) each newer checkpoint skipped and
    why, the files changed since launch, and what a world change changes. Refused (RunRefused, with
    why) for anything else, and for a world shape (the run's profile.toml now) other than the launch's
    unless `allow_world_change`."""
    try:
        with run.control("resume"):
            return _resume_locked(run, allow_world_change, report)
    except (FolderBusy, FolderNotWritable, StateUnreadable) as err:
        raise RunRefused(f"cannot resume {run.run_id}: {err}") from None


def resume_world_check(run: RunFolder, allow_world_change: bool) -> tuple[World | None, list[str]]:
    """The world now when it differs from the launch's and the change is allowed (the launch must be
    rebuilt), else None; and the lines to say (changed files, what a world change changes).
    RunRefused with the exact difference when the world changed and that is not allowed."""
    record = read_world(run.world_path)
    if record is None:
        return None, []
    notes = changed_files(record)
    try:
        now = profile_world(run.read_profile())
    except (OSError, ValueError) as err:
        raise RunRefused(f"cannot resume {run.run_id}: its profile.toml cannot be read ({err})") from None
    differences = world_differences(record.world, now)
    if not differences:
        return None, notes
    if not allow_world_change:
        raise RunRefused(f"run {run.run_id}: the world differs from the checkpoint's: " + "; ".join(differences)
                         + ". Put profile.toml's [distribution] / [training] back, or resume with "
                           "--allow-world-change (the global batch, the steps per epoch and the data order change)")
    return now, [*notes, f"world changed (allowed): {'; '.join(differences)}", *what_changes(record.world, now)]


def _resume_locked(run: RunFolder, allow_world_change: bool, report: Callable[[str], None]) -> RunFolder:
    state = refresh(run)
    if state.status == "finished":
        last = run.complete_checkpoints()[-1:]
        raise RunRefused(f"run {run.run_id} finished: resuming would train past its end, and swift's rotation would "
                         "delete a completed checkpoint. To train more, start a new run from its checkpoint"
                         + (f" ({last[0]})" if last else "") + f": workbench resume {run.run_id} --as-new-run")
    if state.status not in RESUMABLE_STATUSES:
        hint = "stop it first" if state.is_active else "only a stopped, failed or lost (unknown) run can be resumed"
        raise RunRefused(f"run {run.run_id} is {state.status}; {hint}")
    if state.on_other_host():  # after a reboot of this host its processes are gone by definition: resumable
        raise RunRefused(f"run {run.run_id} was {state.elsewhere()}; resume it there")
    taken = _output_taken_by_other(run)
    if taken:
        raise RunRefused(f"cannot resume {run.run_id}: {taken}")
    command = prepare_resume(run, state, allow_world_change, report)
    env = {k: v for k, v in command.get("env", {}).items() if isinstance(v, str) and v != "***"}
    env[run_marker(run.path).env] = run_marker(run.path).value
    try:
        pid, started = start_detached(supervisor_argv(run.path), env, run.path, run.log_path)
    except BaseException:
        run.write_state(state)  # not started: the run stays as it was, resumable again
        raise
    _record_supervisor(run, pid, started)
    return run


def prepare_resume(run: RunFolder, state: RunState, allow_world_change: bool = False,
                   report: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Everything a resume does before it starts the supervisor: take the newest complete checkpoint (say
    which newer ones were skipped and why), check the world, rewrite command.json with
    --resume_from_checkpoint and state.json as a new attempt, and say it in the run's log. Returns the
    command. RunRefused (nothing changed) when there is no complete checkpoint or the world changed.
    A SLURM job that is requeued calls this in place (backend.export.slurm)."""
    choice = choose_resume_checkpoint(run.checkpoints(), run.world_size())
    if choice.checkpoint is None:
        why = "; ".join(v.problem or "" for v in choice.skipped[:2])
        raise RunRefused(f"run {run.run_id} has no complete checkpoint to resume from" + (f" ({why})" if why else ""))
    checkpoint = choice.checkpoint
    command = run.read_command()
    if not isinstance(command.get("argv"), list) or not all(isinstance(a, str) for a in command["argv"]):
        why = "is missing" if not run.command_path.is_file() else "is damaged (no argv list)"
        raise RunRefused(f"cannot resume {run.run_id}: {run.command_path.name} {why}, so the run's command is unknown")
    new_world, notes = resume_world_check(run, allow_world_change)
    if new_world is not None:
        command = _rebuilt_command(run, command, new_world)
    argv = [a for a in command["argv"]]
    if "--resume_from_checkpoint" in argv:
        position = argv.index("--resume_from_checkpoint")
        del argv[position:position + 2]
    argv += ["--resume_from_checkpoint", str(checkpoint)]
    command["argv"] = argv
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    clear_save_request(run.path)  # a request left by the last attempt must not save the new one at once
    run.write_state(state.model_copy(update={
        "status": "starting", "attempt": state.attempt + 1, "resumed_from": str(checkpoint),
        "exit_code": None, "signal": None, "failure_reason": None, "ended_at": None, "stop_requested": False,
        "trainer_pid": None, "trainer_started": None, "supervisor_pid": None, "supervisor_started": None,
        "host": run.new_state("").host, "boot_id": run.new_state("").boot_id,
    }))
    said = [*choice.lines(), *notes]
    for line in said:
        report(line)
    with open(run.log_path, "a", encoding="utf-8") as log:
        log.write(f"\n===== workbench: resuming from {checkpoint} (attempt {state.attempt + 1}) =====\n")
        for line in said:
            log.write(f"workbench: {line}\n")
    return command


def _rebuilt_command(run: RunFolder, command: dict[str, Any], world: World) -> dict[str, Any]:
    """The run's launch built again from its profile.toml as it is now (another world shape), with the
    model it launched with; the world record is updated to the new shape."""
    record = read_world(run.world_path)
    base_dir = Path(record.base_dir) if record is not None and record.base_dir else None
    argv = command["argv"]
    model = argv[argv.index("--model") + 1] if "--model" in argv[:-1] else None
    profile = run.read_profile()
    plan = build_launch(profile, run.path, detect_hardware(), base_dir=base_dir, model_path=model)
    plan.write_configs()
    if record is not None:  # the launch's hashes stay: a later resume still compares with the launch
        write_text_atomic(run.world_path, record.model_copy(update={"world": world}).model_dump_json(indent=2))
    return {**command, "argv": plan.argv, "env": plan.redacted_env(), "cwd": plan.cwd, "shell": plan.shell_line()}


def _output_taken_by_other(run: RunFolder) -> str | None:
    from backend.runs.outputs import owner_of

    owner = owner_of(run.output_dir)
    if owner is not None and owner != str(run.path):
        return f"its output_dir {run.output_dir} now belongs to run {Path(owner).name}"
    return None


def delete_run(run: RunFolder, damaged_ok: bool = True) -> None:
    """Remove a proven run folder that is not running (the CLI and the TUI ask first). A damaged run
    (state.json unreadable) only with `damaged_ok`. RunRefused with the reason otherwise."""
    problem = run.identity_problem()
    if problem:
        raise RunRefused(f"not deleted: {problem}")
    try:
        with run.control("delete"):
            state = refresh(run)
            if state.is_active:
                where = f" on host {state.host}" if state.on_other_host() else ""
                raise RunRefused(f"run {run.run_id} is {state.status}{where}; stop it before deleting")
            if state.status == "damaged" and not damaged_ok:
                raise RunRefused(f"run {run.run_id} is {state.failure_reason}; confirm to delete it anyway")
            if run_marker(run.path).processes():
                raise RunRefused(f"run {run.run_id} still has live processes; stop it before deleting")
            shutil.rmtree(run.path)
    except (FolderBusy, FolderNotWritable) as err:
        raise RunRefused(f"not deleted: {err}") from None
    except OSError as err:
        raise RunRefused(f"could not delete all of {run.path}: {err.strerror or err}") from None
