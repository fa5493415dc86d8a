"""The batch a profile trains with: swift's default gradient accumulation when the profile leaves it unset,
and the global batch (micro-batch x accumulation x processes), the one number OOM retries and sweeps keep.

swift's rule is derived once here from its code (ms-swift 4.6 swift/trainers/arguments.py,
TrainArgumentsMixin.__post_init__); tests/test_swift_default_accumulation.py has swift itself compute it in a
child process for micro-batch 1-16 x world 1-8 and compares."""

from __future__ import annotations

import math

from backend.profile.model import LaunchProfile

SWIFT_TARGET_BATCH = 16  # swift aims its default accumulation at a global batch of at least 16


def swift_default_accumulation(micro_batch: int, world_size: int) -> int:
    """The accumulation swift picks when `gradient_accumulation_steps` is unset."""
    return max(1, math.ceil(SWIFT_TARGET_BATCH / micro_batch / world_size))


def accumulation(profile: LaunchProfile) -> int:
    """The accumulation the profile trains with: its own, else swift's default."""
    t = profile.training
    if t.gradient_accumulation_steps is not None:
        return t.gradient_accumulation_steps
    return swift_default_accumulation(t.per_device_train_batch_size, profile.distribution.world_size)


def global_batch(profile: LaunchProfile) -> int:
    """Sequences per optimizer step over every process: micro-batch x accumulation x world size."""
    return profile.training.per_device_train_batch_size * accumulation(profile) * profile.distribution.world_size
