"""A profile's `[sweep]`: a grid over dotted keys expanded into one profile per combination, its name
carrying the values (`quickstart-lr1e-04-rank8`)."""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backend.profile import LaunchProfile
from backend.queue.store import Entry, QueueFile

SHORT_NAMES = {"learning_rate": "lr", "lora_rank": "rank", "lora_alpha": "alpha", "per_device_train_batch_size": "bs",
               "gradient_accumulation_steps": "acc", "num_train_epochs": "ep", "max_steps": "steps"}


class SweepError(ValueError):
    """A sweep key or value the profile does not accept (the message names the key and what to do)."""


MAX_POINTS = 256  # a grid is counted before anything is built; a bigger one is refused, naming its size


def _label(key: str, value: Any, digits: int = 0) -> str:
    leaf = key.rsplit(".", 1)[-1]
    short = SHORT_NAMES.get(leaf, leaf)
    small = isinstance(value, float) and (abs(value) < 1e-3 and value)
    shown = (f"{value:.{digits}e}" if digits < 16 else repr(value)) if small else str(value)
    return re.sub(r"[^A-Za-z0-9_.+-]", "", f"{short}{shown}")


def _labels(key: str, values: list[Any]) -> list[str]:
    """One label per value, as short as keeps them apart (1e-04 and 1.5e-04 with a digit more); SweepError
    when two values still read the same (values that differ only in characters a name cannot hold)."""
    for digits in range(17):
        labels = [_label(key, value, digits) for value in values]
        if len(set(labels)) == len(labels):
            return labels
    twins = next((a, b) for i, a in enumerate(values) for b in values[i + 1:]
                 if _label(key, a, 16) == _label(key, b, 16))
    raise SweepError(f"sweep key {key!r}: the values {twins[0]!r} and {twins[1]!r} would give runs of one name "
                     f"({_label(key, twins[0], 16)!r}); give values that differ in letters or digits")


def count_points(profile: LaunchProfile) -> int:
    """The number of runs the grid makes (1 without a sweep); SweepError for a key without values or a grid
    above MAX_POINTS (counted, never built)."""
    total = 1
    for key, values in profile.sweep.items():
        if not values:
            raise SweepError(f"sweep key {key!r} has no values: give a list of at least one")
        total *= len(values)
    if total > MAX_POINTS:
        sizes = " x ".join(str(len(v)) for v in profile.sweep.values())
        raise SweepError(f"[sweep] of {profile.name}: {sizes} values make {total:,} runs, more than the "
                         f"{MAX_POINTS} a sweep may queue; give fewer values or split it into several profiles")
    return total


def expand(profile: LaunchProfile) -> list[LaunchProfile]:
    """One profile per combination of the sweep's values (itself, without the sweep, when it has none);
    names `<name>-<label><value>-...`, each its own. An explicit `[output] output_dir` becomes one folder
    per run inside it (`<output_dir>/<run name>`). SweepError for a key that is not a profile field, a value
    it refuses, values that would share a name, or a grid above MAX_POINTS."""
    if not profile.sweep:
        return [profile]
    count_points(profile)
    keys = list(profile.sweep)
    labels = {key: dict(zip(map(repr, profile.sweep[key]), _labels(key, profile.sweep[key]), strict=True))
              for key in keys}
    out = []
    for values in itertools.product(*(profile.sweep[k] for k in keys)):
        data = profile.model_dump()
        data["sweep"] = {}
        for key, value in zip(keys, values, strict=True):
            _assign(data, key, value)
        data["name"] = "-".join([profile.name, *(labels[k][repr(v)] for k, v in zip(keys, values, strict=True))])
        if data["output"]["output_dir"]:
            data["output"]["output_dir"] = str(Path(data["output"]["output_dir"]) / data["name"])
        try:
            out.append(LaunchProfile.model_validate(data))
        except ValidationError as err:
            raise SweepError(f"sweep {dict(zip(keys, values, strict=True))}: {err.errors()[0]['msg']} "
                             f"(at {'.'.join(str(p) for p in err.errors()[0]['loc'])})") from None
    return out


def _assign(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
            raise SweepError(f"sweep key {key!r}: {part!r} is not a profile section (see `workbench schema`)")
        node = node[part]
    if parts[-1] not in node:
        raise SweepError(f"sweep key {key!r}: {parts[-1]!r} is not a profile field (see `workbench schema`)")
    node[parts[-1]] = value


# ---------------------------------------------------------------- a sweep's runs, ranked


def sweep_of(profile: LaunchProfile) -> tuple[str | None, str | None]:
    """The (sweep name, sweep id) the entries of this profile carry: its name and a new id when it has a
    `[sweep]`, else (None, None)."""
    return (profile.name, f"s{secrets.token_hex(3)}") if profile.sweep else (None, None)


def sweep_entries(queue: QueueFile, ref: str) -> tuple[str, list[Entry]]:
    """A sweep's name and entries, by sweep id or name (a name queued more than once: its latest sweep);
    QueueRefused naming the sweeps there are otherwise."""
    from backend.queue.store import QueueRefused

    ids = [e.sweep_id for e in queue.entries if e.sweep_id and ref in (e.sweep_id, e.sweep)]
    if not ids:
        known = sorted({f"{e.sweep} ({e.sweep_id})" for e in queue.entries if e.sweep_id})
        raise QueueRefused(f"{ref!r} is no sweep in the queue; sweeps: {', '.join(known) or 'none'}")
    latest = max(ids, key=lambda i: max(e.added_at for e in queue.entries if e.sweep_id == i))
    entries = [e for e in queue.entries if e.sweep_id == latest]
    return str(entries[0].sweep), entries


@dataclass(frozen=True)
class Ranked:
    """One run of a sweep, as the checkpoint scoreboard judges it."""

    run_dir: str
    run_id: str
    value: float | None  # the best checkpoint's metric (or train loss when the run has no evaluation)
    text: str  # the scoreboard's line: "best: checkpoint-6: lowest eval loss 1.23", or why there is none


def rank_runs(run_dirs: list[str]) -> list[Ranked]:
    """Runs ranked by their scoreboard's best checkpoint: those judged on the eval metric first (by it, best
    first), then those judged on the train loss alone, then those with no best checkpoint (in the order given)."""
    from backend.checkpoints.board_text import summary
    from backend.checkpoints.scoreboard import scoreboard
    from backend.rundir.layout import RunFolder

    keyed = []
    for order, run_dir in enumerate(run_dirs):
        run = RunFolder(run_dir)
        board = scoreboard(run)
        best = board.best
        value = None if best is None else board.value(best)
        text = summary(board).split(" · ")[-1]  # without the attempt link: the list says it elsewhere
        if value is None:
            key: tuple[int, float, int] = (2, 0.0, order)
        else:
            sign = -1.0 if board.basis == "eval" and board.metric.greater_is_better else 1.0
            key = (0 if board.basis == "eval" else 1, sign * value, order)
        keyed.append((key, Ranked(str(run.path), run.run_id, value, text)))
    return [ranked for _, ranked in sorted(keyed, key=lambda pair: pair[0])]


def sweep_runs(ref: str | None = None, *, run_dir: str | None = None, folder: Any = None) -> tuple[str, list[str]]:
    """A sweep's name and the run folders its entries started (by sweep id or name, or the sweep of the entry
    that started `run_dir`). QueueRefused when there is no such sweep or none of its runs started yet."""
    from pathlib import Path

    from backend.queue.store import QueueRefused, read_queue

    queue = read_queue(folder)
    if ref is None:
        wanted = str(Path(run_dir or "").resolve())
        owner = next((e for e in queue.entries if e.run_dir and str(Path(e.run_dir).resolve()) == wanted), None)
        if owner is None or not owner.sweep_id:
            raise QueueRefused(f"{Path(wanted).name} was not started by a sweep of the queue (`workbench queue add` "
                               "of a profile with a [sweep] grid)")
        ref = owner.sweep_id
    name, entries = sweep_entries(queue, ref)
    runs = [str(e.run_dir) for e in entries if e.run_dir]
    if not runs:
        raise QueueRefused(f"no run of sweep {name} has started yet ({len(entries)} queued)")
    return name, runs
