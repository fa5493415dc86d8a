"""Queue changes as the commands and the Queue screen make them: backend.queue.store.change, with a SLURM entry's
job cancelled (`scancel`, that job only) before the entry is removed."""

from __future__ import annotations

from pathlib import Path

from backend.queue.slurm import cancel
from backend.queue.store import Entry
from backend.queue.store import change as change_in_store


def change(ref: str, what: str, folder: Path | None = None) -> Entry:
    """`rm`, `up`, `down`, `pause` or `resume` the entry `ref` (see store.change); SlurmRefused (a QueueRefused)
    when a SLURM job cannot be cancelled: the entry stays."""
    return change_in_store(ref, what, folder, cancel=cancel)
