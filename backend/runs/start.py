"""Start a run: validate the profile, write the run folder (profile, command, state, world, forecast),
check the disk and the output folder, and start the supervisor detached. A launch that fails gives back
all it took."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backend.core.fs import write_text_atomic
from backend.core.paths import workspace_dir
from backend.core.process_identity import run_marker
from backend.core.units import size
from backend.data.files import hostile_dataset
from backend.hardware.machine import HardwareInfo, detect_hardware, trains_on_cpu
from backend.launch.command import LaunchPlan, build_launch
from backend.launch.validate import Problem, errors, validate
from backend.models.resolved import ResolvedProfile, resolve_profile
from backend.profile import LaunchProfile, save_profile
from backend.rundir import index
from backend.rundir.layout import FolderNotWritable, RunFolder, StateUnreadable, new_run_id
from backend.rundir.process import start_detached, supervisor_argv
from backend.rundir.world import World, world_of, write_world
from backend.runs.errors import LaunchRefused
from backend.runs.outputs import claim_output_dir, output_dir_problem, release_output_dir


def _hostile_datasets(resolved: ResolvedProfile) -> Iterator[Problem]:
    """A local dataset with a line too long or a row nested too deep refuses the launch before anything
    starts (swift's reader would take gigabytes or die by SIGSEGV): validate's check, which reads the data
    only when swift is asked too."""
    for found in resolved.datasets():
        problem = hostile_dataset([str(found.local)]) if found.local is not None else None
        if problem:
            yield Problem(found.field, "error", f"{problem}.", "Split or flatten that row, or leave it out.")


def start_run(
    profile: LaunchProfile,
    *,
    base_dir: Path | None = None,
    workspace: Path | None = None,
    hardware: HardwareInfo | None = None,
) -> RunFolder:
    """Validate, write the run folder, start the supervisor detached. Returns at once.

    The model and the datasets are resolved once, here: validation, swift's report on the data and the
    command all name what was resolved (a folder moved meanwhile does not change what the command names)."""
    hardware = hardware or detect_hardware()
    resolved = resolve_profile(profile, base_dir)
    blocking = errors(validate(profile, hardware, base_dir=base_dir, resolved=resolved)) or \
        list(_hostile_datasets(resolved))
    if blocking:
        raise LaunchRefused(blocking)
    resolved.build_model()
    _ask_wrap_class(profile, hardware, resolved)
    try:
        run = RunFolder.create(workspace or workspace_dir(), new_run_id(profile.name))
    except FolderNotWritable as err:
        raise LaunchRefused([Problem("workspace", "error", str(err), "Free space or choose a writable "
                                     "--workspace (WORKBENCH_WORKSPACE).")]) from None
    claimed: Path | None = None
    try:
        with run.control("start"):
            plan = build_launch(profile, run.path, hardware, base_dir=base_dir, resolved=resolved)
            write_run_files(run, profile, plan, base_dir=base_dir, resolved=resolved)
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


def _ask_wrap_class(profile: LaunchProfile, hardware: HardwareInfo, resolved: ResolvedProfile) -> None:
    """An FSDP run that wraps transformer blocks without naming their class asks transformers about its model
    first (the model_shape oracle: one child process the first time, cached), so the launch built next wraps
    transformers' own decoder-layer class (launcher_config.detect_decoder_layer reads only the cache)."""
    fsdp = profile.distribution.fsdp
    if profile.distribution.strategy != "fsdp" or fsdp.auto_wrap_policy != "TRANSFORMER_BASED_WRAP" \
            or fsdp.transformer_layer_cls_to_wrap or trains_on_cpu(profile.distribution.device, hardware):  # FSDP runs on GPUs only
        return
    from backend.models.shape_exact import exact_shape

    try:
        exact_shape(resolved.config_dir())
    except Exception:  # never stops a launch: the wrap class then comes from launcher_config's table
        pass


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


def write_run_files(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan, base_dir: Path | None = None, *,
                    resolved: ResolvedProfile | None = None) -> None:
    run.write_identity()  # a folder made by another path (SLURM export) is a proven run folder too
    save_profile(profile, run.profile_path)
    plan.write_configs()
    command = {"argv": plan.argv, "env": plan.redacted_env(), "cwd": plan.cwd, "output_dir": str(plan.output_dir),
               "shell": plan.shell_line()}
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    run.write_state(run.new_state(profile.name))
    write_world(run.world_path, profile_world(profile), plan.argv, base_dir)
    _write_forecast(run, profile, plan, resolved or resolve_profile(profile, base_dir))


def profile_world(profile: LaunchProfile) -> World:
    """The world shape a profile asks for (world.json records it at launch; a resume compares)."""
    d, t = profile.distribution, profile.training
    return world_of(d.num_machines, d.nproc_per_node, t.per_device_train_batch_size, t.gradient_accumulation_steps)


def _write_forecast(run: RunFolder, profile: LaunchProfile, plan: LaunchPlan, resolved: ResolvedProfile) -> None:
    """Store the memory planner's forecast beside the run (predicted vs measured later), of the model and data
    the launch resolved (the data's longest row sizes an unset max_length)."""
    model_dir = plan.argv[plan.argv.index("--model") + 1]
    try:
        from backend.estimate.forecast import forecast_for_profile

        # model_dir: a folder, or a hub id refs resolves
        forecast: dict[str, Any] = forecast_for_profile(profile, model_dir, base_dir=resolved.base_dir,
                                                           on_cpu="--use_cpu" in plan.argv, resolved=resolved)
    except Exception as err:  # a forecast must never stop a launch
        forecast = {"error": f"no forecast: {err}"}
    forecast.update(_longest_batch(profile, resolved))
    write_text_atomic(run.forecast_path, json.dumps(forecast, indent=2))


def _longest_batch(profile: LaunchProfile, resolved: ResolvedProfile) -> dict[str, Any]:
    """When the largest batch lands (#37), for the monitor: swift's answer when already asked (`workbench
    estimate`), never a child at launch."""
    try:
        from backend.launch.longest_batch import predict

        found = predict(profile, detect_hardware(), resolved.base_dir, ask=False, resolved=resolved)
    except Exception:  # a forecast must never stop a launch
        return {}
    return {"longest_batch": found.to_json()} if found is not None else {}


def _start_supervisor(run: RunFolder, plan: LaunchPlan) -> None:
    env = {**plan.env, run_marker(run.path).env: run_marker(run.path).value}
    pid, started = start_detached(supervisor_argv(run.path), env, run.path, run.log_path)
    record_supervisor(run, pid, started)


def record_supervisor(run: RunFolder, pid: int, started: float | None) -> None:
    """Record the supervisor unless it has already recorded itself (it may be that quick)."""
    with contextlib.suppress(StateUnreadable):
        state = run.read_state()
        if state.supervisor_pid == pid:
            return
    run.update_state(supervisor_pid=pid, supervisor_started=started, pgid=pid, started_at=time.time())
