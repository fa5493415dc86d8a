"""A profile's `[sweep]`: a grid over dotted keys expanded into one profile per combination, its name
carrying the values (`quickstart-lr1e-04-rank8`)."""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from backend.profile import LaunchProfile
from backend.queue.store import Entry, QueueFile

SHORT_NAMES = {"learning_rate": "lr", "lora_rank": "rank", "lora_alpha": "alpha", "per_device_train_batch_size": "bs",
               "gradient_accumulation_steps": "acc", "num_train_epochs": "ep", "max_steps": "steps"}


class SweepError(ValueError):
    """A sweep key or value the profile does not accept (the message names the key and what to do)."""


def _label(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    short = SHORT_NAMES.get(leaf, leaf)
    shown = f"{value:.0e}" if isinstance(value, float) and (abs(value) < 1e-3 and value) else str(value)
    return re.sub(r"[^A-Za-z0-9_.+-]", "", f"{short}{shown}")


def expand(profile: LaunchProfile) -> list[LaunchProfile]:
    """One profile per combination of the sweep's values (itself, without the sweep, when it has none);
    names `<name>-<label><value>-...`. SweepError for a key that is not a profile field or a value it
    refuses."""
    if not profile.sweep:
        return [profile]
    keys = list(profile.sweep)
    for key in keys:
        if not profile.sweep[key]:
            raise SweepError(f"sweep key {key!r} has no values: give a list of at least one")
    out = []
    for values in itertools.product(*(profile.sweep[k] for k in keys)):
        data = profile.model_dump()
        data["sweep"] = {}
        for key, value in zip(keys, values, strict=True):
            _assign(data, key, value)
        data["name"] = "-".join([profile.name, *(_label(k, v) for k, v in zip(keys, values, strict=True))])
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
        value = None if best is None else (best.eval_value if board.basis == "eval" else best.train_loss)
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
