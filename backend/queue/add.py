"""Queue profiles: each (a sweep's every combination) copied into the queue folder, placed by priority.
`workbench queue add` and the TUI's F5 "Queue" both come here."""

from __future__ import annotations

from pathlib import Path

from backend.profile import LaunchProfile, save_profile
from backend.queue.store import Entry, edit, insert_by_priority, new_entry_id, queue_dir
from backend.queue.sweep import expand, sweep_of


def add_profiles(items: list[tuple[LaunchProfile, Path]], *, gpus: str = "auto", priority: int = 0,
                 hold: bool = False, folder: Path | None = None) -> list[Entry]:
    """Queue (profile, its folder) pairs; the entries added, in order. SweepError for a bad sweep and
    QueueDamaged for a damaged queue file (set aside), before anything is queued."""
    folder = folder or queue_dir()
    (folder / "profiles").mkdir(parents=True, exist_ok=True)
    expanded = [(p, base_dir, tag) for profile, base_dir in items for tag in [sweep_of(profile)]
                for p in expand(profile)]
    added: list[Entry] = []
    for profile, base_dir, (sweep, sweep_id) in expanded:
        entry = Entry(id=new_entry_id(), name=profile.name, profile_file="", base_dir=str(base_dir),
                      priority=priority, gpus=gpus, state="paused" if hold else "waiting", sweep=sweep,
                      sweep_id=sweep_id)
        entry.profile_file = str(folder / "profiles" / f"{entry.id}.toml")
        if gpus != "auto":
            profile = profile.model_copy(update={"distribution": profile.distribution.model_copy(
                update={"gpu_ids": [int(g) for g in gpus.split(",")]})})
        save_profile(profile, entry.profile_file)
        added.append(entry)
    with edit(folder) as queue:
        for entry in added:
            insert_by_priority(queue, entry)
    return added
