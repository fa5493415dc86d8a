"""The OOM retry that keeps the recipe: half the micro-batch and twice the accumulation (the global
batch is the same, and said so), or gradient checkpointing switched on when the micro-batch is 1."""

from __future__ import annotations

from backend.profile import LaunchProfile


def swift_accumulation(profile: LaunchProfile) -> int:
    """The accumulation the run used: the profile's, or swift's default when unset (16 / (batch x GPUs))."""
    t = profile.training
    if t.gradient_accumulation_steps is not None:
        return t.gradient_accumulation_steps
    return max(1, 16 // (t.per_device_train_batch_size * profile.distribution.world_size))


def oom_retry_profile(profile: LaunchProfile, checkpoint: str | None) -> tuple[LaunchProfile, str] | None:
    """The profile of the next attempt and the line that says what changed; None when nothing is left to
    shrink (micro-batch 1 and gradient checkpointing already on)."""
    t = profile.training
    data = profile.model_dump()
    batch, accumulation = t.per_device_train_batch_size, swift_accumulation(profile)
    if batch >= 2 and batch % 2 == 0:
        data["training"]["per_device_train_batch_size"] = batch // 2
        data["training"]["gradient_accumulation_steps"] = accumulation * 2
        world = profile.distribution.world_size
        note = (f"OOM retry: micro-batch {batch} -> {batch // 2}, accumulation {accumulation} -> {accumulation * 2}; "
                f"global batch {batch * accumulation * world} kept")
    elif not t.gradient_checkpointing:
        data["training"]["gradient_checkpointing"] = True
        note = "OOM retry: gradient checkpointing switched on (micro-batch already 1); global batch kept"
    else:
        return None
    if checkpoint:
        data["extra_swift_args"] = {**data["extra_swift_args"], "resume_from_checkpoint": checkpoint}
        note += f"; resumes from {checkpoint}"
    return LaunchProfile.model_validate(data), note
