"""Why a queued entry waits, or None when it may start now: pure decisions on numbers measured by the
caller (host RAM on CPU; a GPU box's per-GPU free memory is the same rule per GPU)."""

from __future__ import annotations

from backend.core.units import gib
from backend.hardware.gpu_choice import choose_gpus
from backend.queue.slurm import SlurmRefused, describe, job_states
from backend.queue.store import Entry, QueueFile


def why_waiting(queue: QueueFile, entry: Entry, *, max_parallel: int, margin: float,
                free_bytes: int | None, names: dict[str, str] | None = None) -> str | None:
    """The reason `entry` does not start now, in the words the queue list shows; None: admit it.

    Order: only the first waiting entry may start (the ones behind it say "after <it>"); then the
    number of queued runs running against `max_parallel` (the entry's profile's); then memory: the
    forecast plus `margin` of it must fit in `free_bytes` less the forecasts of queued runs not at their peak yet
    (held_back; unknown forecast or free memory: not held)."""
    if entry.state == "paused":
        return "paused (`workbench queue resume " + entry.id + "`)"
    if entry.state != "waiting":
        return None
    waiting = [e for e in queue.entries if e.state == "waiting"]
    if waiting and waiting[0] is not entry:
        head = waiting[0]
        return f"after {head.name} ({head.id})"
    running = [e for e in queue.entries if e.state in ("running", "starting")]
    if len(running) >= max_parallel:
        return f"max_parallel {max_parallel} reached (running: {', '.join(e.run_id or e.id for e in running)})"
    if entry.forecast_bytes is not None and free_bytes is not None:
        need = int(entry.forecast_bytes * (1 + margin))
        held, young = held_back(queue)
        if need > free_bytes - held:
            return f"host RAM: {gib(free_bytes)} GiB free, needs {gib(need)} GiB (forecast + margin)" + (
                f"; {gib(held)} GiB of it held for {', '.join(young)} (not at its peak yet)" if held else "")
    return None


def held_back(queue: QueueFile) -> tuple[int, list[str]]:
    """The forecast memory of queued runs starting or running that have not logged a training step yet (what
    is measured free now is still theirs to take), and their names (run id, else entry id)."""
    young = [e for e in queue.entries if e.state in ("starting", "running") and not e.peaked and e.forecast_bytes]
    return sum(int(e.forecast_bytes or 0) for e in young), [e.run_id or e.id for e in young]


def reasons(queue: QueueFile, free_bytes: int | None) -> dict[str, str]:
    """Each pending entry's line for the list: why it waits, or what it is doing."""
    from backend.profile import ProfileError, load_profile

    out: dict[str, str] = {}
    slurm: dict[str, tuple[str, str]] | str = {}
    if any(e.state == "slurm" for e in queue.entries):
        try:
            slurm = job_states()
        except SlurmRefused as err:
            slurm = str(err)
    for entry in queue.entries:
        if entry.state == "slurm":
            out[entry.id] = describe(entry, slurm)
        elif entry.state == "running":
            out[entry.id] = f"running as {entry.run_id}"
        elif entry.state == "starting":
            out[entry.id] = "starting"
        elif entry.state == "done":
            out[entry.id] = f"{entry.outcome}" + (f" ({entry.run_id})" if entry.run_id else "") + \
                (f": {entry.reason}" if entry.reason and entry.outcome != "finished" else "") + _since(entry)
        else:
            try:
                section = load_profile(entry.profile_file).queue
                max_parallel, margin = section.max_parallel, section.memory_margin
            except (ProfileError, OSError):
                out[entry.id] = f"its queued profile {entry.profile_file} cannot be read: remove it and add it again"
                continue
            out[entry.id] = why_waiting(queue, entry, max_parallel=max_parallel, margin=margin,
                                        free_bytes=None if entry.waiting_for else free_bytes) \
                or entry.waiting_for or "next: starts at the keeper's next look"
        if entry.note:
            out[entry.id] += f" [{entry.note}]"
    return out


def _since(entry: Entry) -> str:
    """What became of a stopped, failed or lost entry's run since (`workbench resume` goes on in the same folder)."""
    from backend.rundir.layout import RESUMABLE_STATUSES, RunFolder

    if entry.outcome not in RESUMABLE_STATUSES or not entry.run_dir:
        return ""
    state = RunFolder(entry.run_dir).state_or_damaged()  # as its file says: the list scans no processes
    if state.attempt <= 1 or state.status == entry.outcome and not state.is_active:
        return ""
    return f"; resumed since (attempt {state.attempt}): {state.status}"


def pick_gpus(free: dict[int, int | None], busy: set[int], want: str, count: int, need: int | None,
              margin: float, shared_ok: bool = False) -> tuple[list[int] | None, str | None]:
    """The GPUs an entry gets now, or None and why it waits. `free`: each GPU's free memory as NVML reads
    it (other processes counted); `busy`: GPUs a running queued run holds (never shared unless
    `shared_ok`); `want`: "auto" (the `count` GPUs the one GPU choice picks: backend/hardware/gpu_choice.py)
    or ids "0,1"; `need`: the per-GPU forecast (None: unknown, only the count and the busy ones decide)."""
    usable = {i: f for i, f in free.items() if shared_ok or i not in busy}
    if want == "auto":
        if len(usable) < count:
            return None, f"{count} free GPU(s) needed, {len(usable)} not held by a queued run"
        chosen = choose_gpus(usable, count)  # the most free first; whether they fit is said below, per GPU
    else:
        chosen = [int(i) for i in want.split(",")]
        missing = [i for i in chosen if i not in free]
        if missing:
            return None, f"GPU {missing[0]} is not on this machine (GPUs: {', '.join(map(str, sorted(free)))})"
        held = [i for i in chosen if i not in usable]
        if held:
            return None, f"GPU {held[0]}: held by a queued run"
    if need is not None:
        wanted = int(need * (1 + margin))
        for i in chosen:
            free_bytes = usable[i]
            if free_bytes is not None and free_bytes < wanted:
                return None, f"GPU {i}: {gib(free_bytes)} GiB free, needs {gib(wanted)} GiB (forecast + margin)"
    return chosen, None
