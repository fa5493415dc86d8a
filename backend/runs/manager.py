"""Start, look at, stop, resume, list and delete runs. The CLI and the TUI both call this.

Status is reconciled whenever someone looks: a run whose processes are all gone without
a final status becomes `failed`, with the reason read from its log.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.command import LaunchPlan, build_launch
from backend.events import EventReader
from backend.hardware import HardwareInfo, detect_hardware
from backend.paths import is_builtin, resolve_model
from backend.profile import LaunchProfile, save_profile, write_text_atomic
from backend.runs import index
from backend.runs.diagnose import describe_exit
from backend.runs.layout import RunFolder, RunState, new_run_id, workspace_dir
from backend.runs.process import is_alive, run_processes, start_detached, supervisor_argv, terminate_run
from backend.validate import Problem, errors, validate


class LaunchRefused(Exception):
    """The profile has errors; nothing was started and nothing was written."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class RunNotFound(LookupError):
    pass


# ---------------------------------------------------------------- start


def start_run(
    profile: LaunchProfile,
    *,
    base_dir: Path | None = None,
    workspace: Path | None = None,
    hardware: HardwareInfo | None = None,
) -> RunFolder:
    """Validate, write the run folder, start the supervisor detached. Returns at once."""
    hardware = hardware or detect_hardware()
    blocking = errors(validate(profile, hardware, base_dir=base_dir))
    if blocking:
        raise LaunchRefused(blocking)
    if is_builtin(profile.model.source):
        resolve_model(profile.model.source, base_dir, build=True)
    folder = (workspace or workspace_dir()) / new_run_id(profile.name)
    folder.mkdir(parents=True)
    run = RunFolder(folder)
    plan = build_launch(profile, run.path, hardware, base_dir=base_dir)
    write_run_files(run, profile, plan)
    index.register(run.path)
    _start_supervisor(run, plan)
    return run


def write_run_files(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan) -> None:
    save_profile(profile, run.profile_path)
    plan.write_configs()
    command = {"argv": plan.argv, "env": plan.redacted_env(), "cwd": plan.cwd, "output_dir": str(plan.output_dir),
               "shell": plan.shell_line()}
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    run.write_state(RunState(run_id=run.run_id, profile_name=profile.name))
    _write_forecast(run, profile, plan)


def _write_forecast(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan) -> None:
    """Store the memory planner's forecast beside the run (predicted vs measured later)."""
    model_dir = plan.argv[plan.argv.index("--model") + 1]
    try:
        from backend.estimate.forecast import forecast_for_profile

        forecast: dict[str, Any] = forecast_for_profile(profile, Path(model_dir))
    except Exception as err:  # a forecast must never stop a launch
        forecast = {"error": f"no forecast: {err}"}
    write_text_atomic(run.forecast_path, json.dumps(forecast, indent=2))


def _start_supervisor(run: RunFolder, plan: LaunchPlan) -> None:
    pid = start_detached(supervisor_argv(run.path), plan.env, run.path, run.log_path)
    run.update_state(supervisor_pid=pid, pgid=pid, started_at=time.time())


# ---------------------------------------------------------------- look


def refresh(run: RunFolder) -> RunState:
    """The run's state, reconciled with its processes."""
    state = run.read_state()
    if not state.is_active:
        return state
    if state.host != socket.gethostname():
        return state  # e.g. a SLURM job seen from the login node: its own supervisor keeps state.json
    if is_alive(state.supervisor_pid):
        return state
    if state.status == "starting" and state.supervisor_pid is None:
        return state  # being created right now
    time.sleep(0.05)  # the supervisor may be writing its final state this instant
    state = run.read_state()
    if not state.is_active:
        return state
    if run_processes(run.path, (state.trainer_pid,)):
        return state  # supervisor lost, training still going
    status, reason, sig = describe_exit(-9 if state.stop_requested else 1, run.log_tail(),
                                        stop_requested=state.stop_requested)
    reason = reason if status != "failed" else f"the run's processes vanished without a final status; {reason}"
    return run.update_state(status=status, failure_reason=reason, signal=sig, ended_at=time.time())


def find_run(ref: str) -> RunFolder:
    """A run by folder path, full id, or unique id prefix / substring."""
    path = Path(ref).expanduser()
    if (path / "state.json").is_file():
        return RunFolder(path)
    folders = index.known_folders()
    exact = [f for f in folders if f.name == ref]
    matches = exact or [f for f in folders if f.name.startswith(ref)] or [f for f in folders if ref in f.name]
    if len(matches) == 1:
        return RunFolder(matches[0])
    if not matches:
        raise RunNotFound(f"no run matches {ref!r}; `workbench runs` lists them")
    names = ", ".join(sorted(m.name for m in matches)[:5])
    raise RunNotFound(f"{ref!r} matches several runs ({names}); give more of the id")


def list_runs() -> list[RunFolder]:
    """Every run, active ones first, then newest first."""
    runs = [RunFolder(path) for path in index.known_folders()]
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


def summarize(run: RunFolder) -> RunSummary:
    state = refresh(run)
    last = last_log_event(run)
    step = last.get("step") if last else None
    max_steps = last.get("max_steps") if last else None
    end = state.ended_at or time.time()
    elapsed = end - state.started_at if state.started_at else None
    eta = None
    if state.is_active and last and step and max_steps and last.get("steps_per_second"):
        eta = (max_steps - step) / last["steps_per_second"]
    return RunSummary(run, state, step, max_steps, last.get("loss") if last else None,
                      last.get("loss_scale") if last else None, elapsed, eta)


def last_log_event(run: RunFolder, tail_bytes: int = 65_536) -> dict[str, Any] | None:
    """The newest rank-0 `log` event (final step from `run_end`), read from the file's tail only."""
    path = run.events_path
    if not path.is_file():
        return None
    reader = EventReader(path, offset=max(0, path.stat().st_size - tail_bytes))
    events = reader.read_new()
    rank0 = [e for e in events if e.get("rank", 0) == 0]
    last_log = next((e for e in reversed(rank0) if e.get("type") == "log"), None)
    end = next((e for e in reversed(rank0) if e.get("type") == "run_end"), None)
    if last_log and end:  # the end event has the final step; the log has the last loss
        return {**last_log, "step": end["step"]}
    return last_log or end


# ---------------------------------------------------------------- stop / resume / delete


def stop_run(run: RunFolder, report: Callable[[str], None] = lambda _: None) -> list[str]:
    """Stop every process of the run (SIGINT, SIGTERM, SIGKILL) and mark it stopped."""
    state = refresh(run)
    if not state.is_active:
        return [f"run is already {state.status}; nothing to stop"]
    run.update_state(status="stopping", stop_requested=True)
    slurm_done = _cancel_slurm_job(run)
    if slurm_done:
        return slurm_done
    done = terminate_run(run.path, (state.supervisor_pid, state.trainer_pid), report=report)
    deadline = time.monotonic() + 5
    while run.read_state().status == "stopping" and time.monotonic() < deadline and is_alive(state.supervisor_pid):
        time.sleep(0.1)
    if run.read_state().status == "stopping":  # supervisor did not get to write it
        run.update_state(status="stopped", ended_at=time.time())
    return done or ["no process of the run was alive"]


def _cancel_slurm_job(run: RunFolder) -> list[str]:
    """A run exported to SLURM is stopped through the scheduler (its processes are on other hosts)."""
    job_file = run.path / "slurm_job.json"
    if not job_file.is_file():
        return []
    job_id = str(json.loads(job_file.read_text()).get("SLURM_JOB_ID", ""))
    if not job_id:
        return []
    result = subprocess.run(["scancel", "--signal=INT", "--full", job_id], capture_output=True, text=True)
    if result.returncode != 0:
        return [f"scancel {job_id} failed: {result.stderr.strip()}"]
    return [f"sent SIGINT to SLURM job {job_id} (scancel); its supervisor records the end"]


def resume_run(run: RunFolder) -> RunFolder:
    """Start the run again in its folder from its last checkpoint; the step count carries on."""
    state = refresh(run)
    if state.is_active:
        raise ValueError(f"run {run.run_id} is still {state.status}; stop it first")
    # trainer_state.json is written last: a checkpoint cut off by a stop lacks it
    checkpoints = [c for c in run.checkpoints() if (c / "trainer_state.json").is_file()]
    if not checkpoints:
        raise ValueError(f"run {run.run_id} has no complete checkpoint to resume from")
    command = run.read_command()
    argv = [a for a in command["argv"]]
    if "--resume_from_checkpoint" in argv:
        position = argv.index("--resume_from_checkpoint")
        del argv[position:position + 2]
    argv += ["--resume_from_checkpoint", str(checkpoints[-1])]
    command["argv"] = argv
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    run.write_state(state.model_copy(update={
        "status": "starting", "attempt": state.attempt + 1, "resumed_from": str(checkpoints[-1]),
        "exit_code": None, "signal": None, "failure_reason": None, "ended_at": None, "stop_requested": False,
        "trainer_pid": None,
    }))
    with open(run.log_path, "a", encoding="utf-8") as log:
        log.write(f"\n===== workbench: resuming from {checkpoints[-1]} (attempt {state.attempt + 1}) =====\n")
    env = {k: v for k, v in command.get("env", {}).items() if v != "***"}
    pid = start_detached(supervisor_argv(run.path), env, run.path, run.log_path)
    run.update_state(supervisor_pid=pid, pgid=pid, started_at=time.time())
    return run


def delete_run(run: RunFolder) -> None:
    state = refresh(run)
    if state.is_active:
        raise ValueError(f"run {run.run_id} is {state.status}; stop it before deleting")
    shutil.rmtree(run.path)
