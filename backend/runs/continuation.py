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

from backend.hardware.machine import HardwareInfo
from backend.importing.shell_script import ImportError_, swift_invocation, swift_pairs
from backend.profile import LaunchProfile
from backend.rundir.layout import FolderBusy, FolderNotWritable, RunFolder, StateUnreadable
from backend.runs.errors import RunRefused
from backend.runs.start import start_run
from backend.runs.status import refresh
from backend.runs.verdict import finished_by_evidence


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
    if state.status != "finished" and finished_by_evidence(run) is None:  # finished, then a late signal (#34)
        hint = "resume it instead" if state.status in ("stopped", "failed") else "wait for it to finish"
        raise RunRefused(f"run {run.run_id} is {state.status}: only a finished run is continued as a new run; {hint}")
    checkpoints = run.complete_checkpoints()
    if not checkpoints:
        raise RunRefused(f"run {run.run_id} has no complete checkpoint to start a new run from")
    try:
        profile = run.read_profile()
    except (OSError, ValueError) as err:
        raise RunRefused(f"cannot continue {run.run_id}: its profile.toml cannot be read ({err})") from None
    flags = _swift_flags(run.read_command().get("argv"))
    if not flags.get("model") or not flags.get("dataset"):
        raise RunRefused(f"cannot continue {run.run_id}: its command.json does not say which model and data it used")
    checkpoint = checkpoints[-1]
    profile = profile.model_copy(deep=True)
    profile.name = f"{profile.name}-continued"
    profile.model.source = flags["model"][0]
    profile.data.train = flags["dataset"]
    if flags.get("val_dataset"):
        profile.data.val = flags["val_dataset"]
    if profile.tuner.type == "full":
        profile.model.source = str(checkpoint)
    else:
        profile.extra_swift_args = {**profile.extra_swift_args, "adapters": [str(checkpoint)]}
    profile.output.output_dir = ""  # the new run's own folder: never the finished run's checkpoints
    if max_steps is not None:
        profile.training.max_steps = max_steps
    return profile


def _swift_flags(argv: object) -> dict[str, list[str]]:
    """swift's flags in the run's command (after its launcher), read as the importer reads commands."""
    if not isinstance(argv, list) or not argv or not all(isinstance(word, str) for word in argv):
        return {}
    invocation = swift_invocation(argv)
    if invocation is None:
        return {}
    try:
        return dict(swift_pairs(invocation[3]))
    except ImportError_:
        return {}
