"""Queue profiles: each (a sweep's every combination) validated as the keeper's launch will validate it, then
copied into the queue folder and placed by priority. `workbench queue add` and the TUI's F5 "Queue" both come
here."""

from __future__ import annotations

from pathlib import Path

from backend.profile import LaunchProfile, save_profile
from backend.queue.store import Entry, QueueRefused, edit, insert_by_priority, new_entry_id, queue_dir
from backend.queue.sweep import expand, sweep_of

Point = tuple[LaunchProfile, Path, tuple[str | None, str | None]]  # a run to queue, its folder, its sweep tag


def add_profiles(items: list[tuple[LaunchProfile, Path]], *, gpus: str = "auto", priority: int = 0,
                 hold: bool = False, folder: Path | None = None) -> list[Entry]:
    """Queue (profile, its folder) pairs; the entries added, in order. SweepError for a bad sweep,
    QueueRefused for a run the launch would refuse and QueueDamaged for a damaged queue file (set aside),
    before anything is queued."""
    folder = folder or queue_dir()
    points = [(_on_gpus(p, gpus), base_dir, tag) for profile, base_dir in items for tag in [sweep_of(profile)]
              for p in expand(profile)]
    refuse_invalid(points)
    (folder / "profiles").mkdir(parents=True, exist_ok=True)
    added: list[Entry] = []
    for profile, base_dir, (sweep, sweep_id) in points:
        entry = Entry(id=new_entry_id(), name=profile.name, profile_file="", base_dir=str(base_dir),
                      priority=priority, gpus=gpus, state="paused" if hold else "waiting", sweep=sweep,
                      sweep_id=sweep_id)
        entry.profile_file = str(folder / "profiles" / f"{entry.id}.toml")
        save_profile(profile, entry.profile_file)
        added.append(entry)
    with edit(folder) as queue:
        for entry in added:
            insert_by_priority(queue, entry)
    return added


def _on_gpus(profile: LaunchProfile, gpus: str) -> LaunchProfile:
    if gpus == "auto":
        return profile
    return profile.model_copy(update={"distribution": profile.distribution.model_copy(
        update={"gpu_ids": [int(g) for g in gpus.split(",")]})})


def refuse_invalid(points: list[Point]) -> None:
    """QueueRefused naming every run whose profile the launch would refuse on this machine (the rules that need
    no child process: what validate says without asking swift), with the problems; nothing is queued then."""
    from backend.hardware.machine import detect_hardware
    from backend.launch.validate import errors, validate

    hardware = detect_hardware()
    refused = []
    for profile, base_dir, _ in points:
        blocking = errors(validate(profile, hardware, base_dir=base_dir))
        if blocking:
            refused.append(f"{profile.name}: " + "; ".join(str(p) for p in blocking))
    if refused:
        raise QueueRefused(f"not queued ({len(refused)} of {len(points)} run(s) would be refused at launch; "
                           "nothing was queued):\n  " + "\n  ".join(refused))
