"""When each waiting entry starts (#25 step 1): an estimate from what was measured, "unknown" where nothing was.

A running entry ends at now + its ETA: the steps left over the steps per second of its last log event, as the
runs list reads them (backend.runs.summaries.summarize, with the state as its file says: the keeper reconciles
running entries every second). A waiting entry starts when the queue's order and its `max_parallel` let it:
when enough of the runs ahead of it have ended, never before the entry before it. It then lasts its forecast
duration: the wall time of a run of the same recipe in this queue (its profile equal but for the name, the
learning rate, the seed and the sections that do not change the work: queue, run, output, sweep), finished
(its elapsed time) or running (elapsed + ETA); without one, a run of the same sweep (its points differ in the
swept values only). The memory forecast says nothing of time, so without such a run the duration is unknown,
and so is the start of every entry that waits for it. Memory held outside the queue is not foreseen: an entry
that waits for memory with no queued run to end starts at an unknown time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backend.core.units import duration
from backend.queue.store import Entry, QueueFile

RECIPE_FREE_SECTIONS = {"name", "sweep", "queue", "run", "output"}
RECIPE_FREE_TRAINING = ("learning_rate", "seed")
_FINISHED: dict[str, tuple[dict[str, Any], float] | None] = {}  # entry id -> (recipe, wall seconds) of its run
_MAX_CACHED = 4096


@dataclass(frozen=True)
class Start:
    """An entry's estimated start (epoch seconds), or None and why it is unknown."""

    at: float | None
    why: str = ""

    def text(self, now: float) -> str:
        if self.at is None:
            return "unknown"
        if self.at <= now + 1:
            return "now"
        return f"{time.strftime('%H:%M', time.localtime(self.at))} (in {duration(self.at - now)})"


@dataclass
class _Slot:
    end: float | None  # when the run holding it ends; None: unknown, for `why`
    why: str = ""


def recipe(profile: Any) -> dict[str, Any]:
    """What decides how long a run takes: the profile but for its name, learning rate, seed and the sections
    that do not change the work."""
    data: dict[str, Any] = profile.model_dump(exclude=RECIPE_FREE_SECTIONS)
    for key in RECIPE_FREE_TRAINING:
        data.get("training", {}).pop(key, None)
    return data


def _summary_of(run_dir: str) -> Any:
    from backend.rundir.layout import RunFolder
    from backend.runs.summaries import summarize

    run = RunFolder(run_dir)
    return summarize(run, run.state_or_damaged())  # the state as written: no process scan per list


def start_estimates(queue: QueueFile, *, now: float | None = None, why: dict[str, str] | None = None,
                    summary: Callable[[str], Any] = _summary_of) -> dict[str, Start]:
    """Each waiting or paused entry's estimated start. `why`: admission's reasons (an entry held by memory with
    no queued run to end starts at an unknown time); `summary`: a run folder's list summary."""
    from backend.profile import ProfileError, load_profile

    now = time.time() if now is None else now

    def profile_of(entry: Entry) -> Any:
        try:
            return load_profile(entry.profile_file)
        except (ProfileError, OSError):
            return None

    profiles = {e.id: profile_of(e) for e in queue.entries if e.state != "done"}
    known: list[tuple[dict[str, Any], float, str | None]] = []  # (recipe, wall s, sweep id) of finished and running
    for entry in queue.entries:
        if entry.state == "done" and entry.outcome == "finished" and entry.run_dir:
            if entry.id not in _FINISHED:  # over: its run and its queued profile no longer change
                if len(_FINISHED) >= _MAX_CACHED:
                    _FINISHED.clear()
                profile, s = profile_of(entry), summary(entry.run_dir)
                _FINISHED[entry.id] = None if profile is None or s.elapsed_seconds is None else \
                    (recipe(profile), s.elapsed_seconds)
            found = _FINISHED[entry.id]
            if found is not None:
                known.append((*found, entry.sweep_id))
    slots: list[_Slot] = []
    for entry in queue.entries:
        if entry.state != "running" or not entry.run_dir:
            continue
        s, profile = summary(entry.run_dir), profiles[entry.id]
        if not s.state.is_active:
            slots.append(_Slot(now))  # over; the keeper sees it at its next look
        elif s.eta_seconds is None:
            slots.append(_Slot(None, f"{entry.run_id} has logged no step rate yet"))
        else:
            slots.append(_Slot(now + s.eta_seconds))
            if s.elapsed_seconds is not None and profile is not None:
                known.append((recipe(profile), s.elapsed_seconds + s.eta_seconds, entry.sweep_id))

    def lasts(entry: Entry) -> _Slot:
        profile = profiles[entry.id]
        if profile is not None:
            mine = recipe(profile)
            seconds = [s for r, s, _ in known if r == mine]
            # else a run of the same sweep: its points differ in the swept values only
            seconds = seconds or [s for _, s, sweep in known if entry.sweep_id and sweep == entry.sweep_id]
            if seconds:
                return _Slot(sum(seconds) / len(seconds))
        return _Slot(None, f"no basis for how long {entry.name} takes (no finished or running run of its recipe "
                           "in the queue)")

    for entry in queue.entries:
        if entry.state == "starting":
            took = lasts(entry)
            slots.append(_Slot(now + took.end, "") if took.end is not None else took)
    out: dict[str, Start] = {}
    previous = now
    blocked: str | None = None
    for entry in queue.entries:
        if entry.state == "paused":
            out[entry.id] = Start(None, f"{entry.id} is paused: it starts after `workbench queue resume {entry.id}`")
            continue
        if entry.state != "waiting":
            continue
        if blocked is not None:
            out[entry.id] = Start(None, blocked)
            continue
        profile = profiles[entry.id]
        if profile is None:
            blocked = f"the queued profile of {entry.name} cannot be read"
            out[entry.id] = Start(None, blocked)
            continue
        slots.sort(key=lambda slot: (slot.end is None, slot.end or 0.0))
        freed = max(0, len(slots) - profile.queue.max_parallel + 1)
        ending = slots[:freed]
        unknown = next((slot for slot in ending if slot.end is None), None)
        reason = (why or {}).get(entry.id, "")
        if unknown is not None:
            blocked = unknown.why
        elif not slots and (reason.startswith("host RAM") or reason.startswith("GPU")):
            blocked = f"{entry.name} waits for memory that no queued run holds ({reason})"
        if blocked is not None:
            out[entry.id] = Start(None, blocked)
            continue
        start = max([previous, *(slot.end or 0.0 for slot in ending)])
        del slots[:freed]
        took = lasts(entry)
        slots.append(_Slot(start + took.end) if took.end is not None else took)
        out[entry.id] = Start(start, "")
        previous = start
    return out


def notes(starts: dict[str, Start]) -> list[str]:
    """Why some starts are unknown, each reason once (paused entries are said by their line already)."""
    seen: list[str] = []
    for start in starts.values():
        if start.at is None and start.why and "is paused" not in start.why and start.why not in seen:
            seen.append(start.why)
    return [f"start unknown: {why}" for why in seen]
