"""The OOM retry that keeps the recipe: a smaller micro-batch and as much more accumulation (the global batch
is the same, and said so), or gradient checkpointing switched on when the micro-batch is 1. The global batch is
backend.profile.batch's (swift's own default accumulation when the profile leaves it unset), so the retry resumes
the failed attempt's checkpoint on the same learning-rate schedule."""

from __future__ import annotations

import re
from pathlib import PurePath

from backend.profile import LaunchProfile
from backend.profile.batch import accumulation, global_batch

ATTEMPT_SUFFIX = re.compile(r"-attempt\d+$")


def smaller_micro_batch(batch: int) -> int | None:
    """The largest micro-batch below `batch` that divides it (half of an even one), None for 1: the global batch
    stays whole when the accumulation grows by the same factor."""
    return next((d for d in range(batch // 2, 0, -1) if batch % d == 0), None)


def retry_output_dir(output_dir: str, attempt: int) -> str:
    """An explicit output_dir holds the failed attempt's checkpoints (its claim): the retry writes beside it,
    `<output_dir>-attempt<N>`; an empty one (inside the run folder) stays empty."""
    if not output_dir:
        return output_dir
    path = PurePath(output_dir)
    return str(path.with_name(ATTEMPT_SUFFIX.sub("", path.name) + f"-attempt{attempt}"))


def oom_retry_profile(profile: LaunchProfile, checkpoint: str | None,
                      attempt: int = 2) -> tuple[LaunchProfile, str] | None:
    """The profile of attempt `attempt` and the line that says what changed; None when nothing is left to
    shrink (micro-batch 1 and gradient checkpointing already on)."""
    t = profile.training
    data = profile.model_dump()
    batch, steps, kept = t.per_device_train_batch_size, accumulation(profile), global_batch(profile)
    smaller = smaller_micro_batch(batch)
    if smaller is not None:
        more = steps * (batch // smaller)
        data["training"]["per_device_train_batch_size"] = smaller
        data["training"]["gradient_accumulation_steps"] = more
        default = " (swift's default)" if t.gradient_accumulation_steps is None else ""
        note = (f"OOM retry: micro-batch {batch} -> {smaller}, accumulation {steps}{default} -> {more}; global batch "
                f"{kept} kept ({smaller} x {more} x {profile.distribution.world_size} process(es))")
    elif not t.gradient_checkpointing:
        data["training"]["gradient_checkpointing"] = True
        note = f"OOM retry: gradient checkpointing switched on (micro-batch already 1); global batch {kept} kept"
    else:
        return None
    if profile.output.output_dir:
        data["output"]["output_dir"] = retry_output_dir(profile.output.output_dir, attempt)
        note += f"; writes to {data['output']['output_dir']}"
    if checkpoint:
        data["extra_swift_args"] = {**data["extra_swift_args"], "resume_from_checkpoint": checkpoint}
        note += f"; resumes from {checkpoint} (same global batch: its learning-rate schedule goes on)"
    retry = LaunchProfile.model_validate(data)
    assert global_batch(retry) == kept, "an OOM retry keeps the global batch"  # by construction (smaller divides batch)
    return retry, note
