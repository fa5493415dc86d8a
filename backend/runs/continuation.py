"""Train a finished run further, as a new run that starts from its last complete checkpoint.

A finished run is never resumed in place (swift would train past its end and its checkpoint
rotation would delete a completed checkpoint). Instead a new run folder is made from the finished
run's profile, and it starts from the checkpoint's weights with a fresh optimizer and schedule:
LoRA / QLoRA through swift's `--adapters CHECKPOINT` (swift: "resume training by only loading
adapter weights"), full fine-tuning with the checkpoint folder as the model. The model and the data
are the ones the finished run's command really used (command.json), so relative paths in its
profile no longer matter. The finished run's folder is only read.
"""

from __future__ import annotations

from pathlib import Path

from backend.hardware import HardwareInfo
from backend.profile import LaunchProfile
from backend.runs.layout import FolderBusy, FolderNotWritable, RunFolder, StateUnreadable
from backend.runs.manager import RunRefused, refresh, start_run


def continue_as_new_run(run: RunFolder, *, max_steps: int | None = None, workspace: Path | None = None,
                        hardware: HardwareInfo | None = None) -> RunFolder:
    """Start a new run from the finished `run`'s last complete checkpoint; returns the new run.

    RunRefused (with why) when `run` did not finish, has no complete checkpoint, or its profile or
    command cannot be read; LaunchRefused when the new run's profile does not validate."""
    try:
        with run.control("continue"):
            profile = _continued_profile(run, max_steps)
    except (FolderBusy, FolderNotWritable, StateUnreadable) as err:
        raise RunRefused(f"cannot continue {run.run_id}: {err}") from None
    return start_run(profile, workspace=workspace, hardware=hardware)


def _continued_profile(run: RunFolder, max_steps: int | None) -> LaunchProfile:
    state = refresh(run)
    if state.status != "finished":
        hint = "resume it instead" if state.status in ("stopped", "failed") else "wait for it to finish"
        raise RunRefused(f"run {run.run_id} is {state.status}: only a finished run is continued as a new run; {hint}")
    checkpoints = run.complete_checkpoints()
    if not checkpoints:
        raise RunRefused(f"run {run.run_id} has no complete checkpoint to start a new run from")
    try:
        profile = run.read_profile()
    except (OSError, ValueError) as err:
        raise RunRefused(f"cannot continue {run.run_id}: its profile.toml cannot be read ({err})") from None
    argv = run.read_command().get("argv")
    if not isinstance(argv, list) or "--model" not in argv or "--dataset" not in argv:
        raise RunRefused(f"cannot continue {run.run_id}: its command.json does not say which model and data it used")
    checkpoint = checkpoints[-1]
    profile = profile.model_copy(deep=True)
    profile.name = f"{profile.name}-continued"
    profile.model.source = _values_of(argv, "--model")[0]
    profile.data.train = _values_of(argv, "--dataset")
    if "--val_dataset" in argv:
        profile.data.val = _values_of(argv, "--val_dataset")
    if profile.tuner.type == "full":
        profile.model.source = str(checkpoint)
    else:
        profile.extra_swift_args = {**profile.extra_swift_args, "adapters": [str(checkpoint)]}
    profile.output.output_dir = ""  # the new run's own folder: never the finished run's checkpoints
    if max_steps is not None:
        profile.training.max_steps = max_steps
    return profile


def _values_of(argv: list[str], flag: str) -> list[str]:
    """The words after `flag` up to the next flag (swift's list flags take several values)."""
    start = argv.index(flag) + 1
    values = []
    for word in argv[start:]:
        if word.startswith("--"):
            break
        values.append(word)
    return values
