"""Resume a stopped, failed or lost run in its folder from its newest complete checkpoint: check the
world shape against the launch's, rewrite its command and state as a new attempt, start its supervisor.
`prepare_resume` is the part a requeued SLURM job also does in place."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.contract.save_request import clear_save_request
from backend.core.fs import write_text_atomic
from backend.core.process_identity import run_marker
from backend.core.shell_words import flag_value
from backend.hardware.machine import detect_hardware
from backend.launch.command import build_launch
from backend.rundir.checkpoint_verdict import choose_resume_checkpoint
from backend.rundir.layout import (
    RESUMABLE_STATUSES,
    FolderBusy,
    FolderNotWritable,
    RunFolder,
    RunState,
    StateUnreadable,
)
from backend.rundir.process import start_detached, supervisor_argv
from backend.rundir.world import (
    World,
    WorldUnreadable,
    changed_files,
    load_world,
    read_world,
    what_changes,
    world_differences,
)
from backend.runs.errors import RunRefused
from backend.runs.outputs import owner_of
from backend.runs.start import profile_world, record_supervisor
from backend.runs.status import refresh
from backend.runs.verdict import finished_by_evidence, read_evidence


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


def resume_world_check(run: RunFolder, allow_world_change: bool, argv: list[str]) -> tuple[World | None, list[str]]:
    """The world now when it differs from the launch's and the change is allowed (the launch must be
    rebuilt), else None; and the lines to say (changed files, what a world change changes).
    RunRefused with the exact difference when the world changed and that is not allowed, and when world.json
    is there but damaged (unless allowed: then the check is skipped, and said)."""
    try:
        record = load_world(run.world_path)
    except WorldUnreadable as err:
        if not allow_world_change:
            raise RunRefused(f"cannot resume {run.run_id}: {err}, so the world the checkpoint was made in is "
                             "unknown. Put world.json back, or resume with --allow-world-change to go on without "
                             "the world check") from None
        return None, [f"warning: {err}; the world check is skipped (--allow-world-change)"]
    if record is None:
        return None, []
    notes = changed_files(record, argv)
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
    finished = finished_by_evidence(run) if state.status != "finished" else None
    if state.status == "finished" or finished:
        last = run.complete_checkpoints()[-1:]
        said = f" ({finished}, although its state says {state.status})" if finished else ""
        raise RunRefused(f"run {run.run_id} finished{said}: resuming would train past its end, and swift's rotation "
                         "would delete a completed checkpoint. To train more, start a new run from its checkpoint"
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
    record_supervisor(run, pid, started)
    return run


def prepare_resume(run: RunFolder, state: RunState, allow_world_change: bool = False,
                   report: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Everything a resume does before it starts the supervisor: take the newest complete checkpoint (say
    which newer ones were skipped and why), check the world, rewrite command.json with
    --resume_from_checkpoint and state.json as a new attempt, and say it in the run's log. Returns the
    command. RunRefused (nothing changed) when there is no complete checkpoint or the world changed.
    A SLURM job that is requeued calls this in place (backend.launchers.slurm)."""
    choice = choose_resume_checkpoint(run.checkpoints(), run.world_size())
    if choice.checkpoint is None:
        why = "; ".join(v.problem or "" for v in choice.skipped[:2])
        raise RunRefused(f"run {run.run_id} has no complete checkpoint to resume from" + (f" ({why})" if why else ""))
    checkpoint = choice.checkpoint
    past_end = _at_its_end(run, checkpoint)
    if past_end:
        raise RunRefused(f"cannot resume {run.run_id}: {past_end}; resuming would train past its end. To train "
                         f"more, start a new run from it: workbench resume {run.run_id} --as-new-run")
    command = run.read_command()
    if not isinstance(command.get("argv"), list) or not all(isinstance(a, str) for a in command["argv"]):
        why = "is missing" if not run.command_path.is_file() else "is damaged (no argv list)"
        raise RunRefused(f"cannot resume {run.run_id}: {run.command_path.name} {why}, so the run's command is unknown")
    new_world, notes = resume_world_check(run, allow_world_change, command["argv"])
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
        "trainer_pid": None, "trainer_started": None, "launcher_pid": None, "launcher_started": None,
        "supervisor_pid": None, "supervisor_started": None,
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


def _at_its_end(run: RunFolder, checkpoint: Path) -> str | None:
    """Why `checkpoint` is the run's end (its step reached the max_steps its events name), or None."""
    last = read_evidence(run.events_path)
    max_steps = next((e.max_steps for e in (last.end, last.last_log) if e is not None and e.max_steps), None)
    step = int(checkpoint.name.rsplit("-", 1)[1])
    if max_steps is None or step < max_steps:
        return None
    return f"{checkpoint.name} is at step {step}, the run's last (max_steps {max_steps})"


def _rebuilt_command(run: RunFolder, command: dict[str, Any], world: World) -> dict[str, Any]:
    """The run's launch built again from its profile.toml as it is now (another world shape), with the
    model it launched with; the world record is updated to the new shape."""
    record = read_world(run.world_path)
    base_dir = record.base_path if record is not None else None
    model = flag_value(command["argv"], "--model")
    profile = run.read_profile()
    plan = build_launch(profile, run.path, detect_hardware(), base_dir=base_dir, model_path=model)
    plan.write_configs()
    if record is not None:  # the launch's hashes stay: a later resume still compares with the launch
        write_text_atomic(run.world_path, record.model_copy(update={"world": world}).model_dump_json(indent=2))
    return {**command, "argv": plan.argv, "env": plan.redacted_env(), "cwd": plan.cwd, "shell": plan.shell_line()}


def _output_taken_by_other(run: RunFolder) -> str | None:
    owner = owner_of(run.output_dir)
    if owner is not None and owner != str(run.path):
        return f"its output_dir {run.output_dir} now belongs to run {Path(owner).name}"
    return None
