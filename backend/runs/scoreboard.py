"""The checkpoint scoreboard of a run: each checkpoint with its step, train loss at the save (and its
EMA), the evaluation aligned to it, its size on disk, complete or not, pinned or not; and the best one
by the profile's metric (`training.metric_for_best_model`, swift's `loss` = eval loss, lower is better
by default; the train loss when the run has no evaluation, and it says so).

It reads only the run folder: events.jsonl through backend.events and backend.tail, the checkpoint
folders, the pins file. No model is loaded and nothing of swift is imported.

Alignment: a checkpoint's train loss is the rank-0 Log at its step or the nearest before it; its
evaluation is the Eval at its step or the nearest before it that came after the previous checkpoint
(an evaluation belongs to one checkpoint at most). `eval_step` says which. When the events line that
would hold a value is damaged, the value says "damaged" rather than an older one; a checkpoint folder
that vanished while it was read says "gone". One bad line or folder never hides the other rows.

Pins: `<run>/pins.json` lists the pinned steps; a pinned checkpoint is hard-linked (copied across
filesystems) into `<run>/pinned/checkpoint-N`, outside swift's output folder, where the trainer's
`save_total_limit` rotation (which deletes `output/checkpoint-*` folders) cannot reach it.
"""

from __future__ import annotations

import os
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from backend.events import (
    SCHEMA_VERSION,
    Checkpoint,
    Eval,
    Log,
    damaged_text,
    decode_line,
    decode_lines,
    line_version,
    newer_format_text,
)
from backend.profile import ProfileError
from backend.queue.links import attempt_text
from backend.runs.layout import RunFolder, checkpoint_problem
from backend.runs.pins import pinned_dir, pins_problem, read_pins
from backend.series import SMOOTHING, ema
from backend.tail import Tail
from backend.units import size

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")
_STEP = re.compile(rb'"step"\s*:\s*(\d+)')
_TYPE = re.compile(rb'"type"\s*:\s*"(\w+)"')


# ---------------------------------------------------------------- the metric


@dataclass(frozen=True)
class Metric:
    """What "best" means for a run: swift's metric_for_best_model and greater_is_better."""

    name: str = "loss"
    greater_is_better: bool = False

    @property
    def key(self) -> str:
        """The key of the Eval event's metrics (transformers prefixes eval_)."""
        return self.name if self.name.startswith("eval_") else f"eval_{self.name}"

    @property
    def label(self) -> str:
        return self.key.replace("_", " ")

    @property
    def column(self) -> str:
        return self.key.removeprefix("eval_")


def metric_of(run: RunFolder) -> Metric:
    """The run's metric, as its profile snapshot sets it (swift's rule where it does not)."""
    try:
        training = run.read_profile().training
    except (ProfileError, OSError, ValueError):
        return Metric()
    name = training.metric_for_best_model or "loss"
    greater = training.greater_is_better
    return Metric(name, ("loss" not in name) if greater is None else greater)


# ---------------------------------------------------------------- rows


@dataclass
class Row:
    """One checkpoint of the scoreboard."""

    step: int
    name: str
    path: Path | None
    status: str  # complete | incomplete | gone
    problem: str | None = None
    size_bytes: int | None = None
    train_loss: float | None = None
    train_loss_ema: float | None = None
    train_step: int | None = None  # the Log used (the save's step, or the nearest before it)
    train_damaged: bool = False
    eval_value: float | None = None
    eval_step: int | None = None  # the Eval used (the save's step, or the nearest before it)
    eval_damaged: bool = False
    pinned: bool = False
    pinned_only: bool = False  # the output folder is gone (rotated away): only the pinned copy is left
    best: bool = False
    golden: str | None = None  # golden prompts at this checkpoint ('3/5 match ref'); None: not answered
    swift_eval: str | None = None  # the newest `workbench eval` score of this checkpoint ('0.412'); None: none

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def eval_text(self) -> str:
        if self.eval_damaged:
            return "damaged"
        if self.eval_value is None:
            return "-"
        at = "" if self.eval_step == self.step else f" (step {self.eval_step})"
        return f"{self.eval_value:.4g}{at}"

    def train_text(self) -> str:
        if self.train_damaged:
            return "damaged"
        if self.train_loss is None:
            return "-"
        at = "" if self.train_step == self.step else f" (step {self.train_step})"
        return f"{self.train_loss:.4g}{at}"

    def ema_text(self) -> str:
        return "damaged" if self.train_damaged else "-" if self.train_loss_ema is None else f"{self.train_loss_ema:.4g}"

    def size_text(self) -> str:
        return "-" if self.size_bytes is None else size(self.size_bytes)

    def state_text(self) -> str:
        return {"complete": "complete", "gone": "gone"}.get(self.status, f"incomplete: {self.problem}")

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "name": self.name, "path": str(self.path) if self.path else None,
                "status": self.status, "problem": self.problem, "size_bytes": self.size_bytes,
                "train_loss": None if self.train_damaged else self.train_loss,
                "train_loss_ema": None if self.train_damaged else self.train_loss_ema,
                "train_step": self.train_step, "train_damaged": self.train_damaged,
                "eval_value": None if self.eval_damaged else self.eval_value, "eval_step": self.eval_step,
                "eval_damaged": self.eval_damaged, "pinned": self.pinned, "pinned_only": self.pinned_only,
                "best": self.best, "golden": self.golden,
                "swift_eval": self.swift_eval}


@dataclass
class Scoreboard:
    run_id: str
    metric: Metric
    rows: list[Row] = field(default_factory=list)
    basis: str = "eval"  # eval: the metric of the evaluations; train: the train loss (no evaluation)
    problems: list[str] = field(default_factory=list)  # damaged or newer events lines
    gone_steps: list[int] = field(default_factory=list)  # saved (an event says so), folder no longer there
    attempt: str = ""  # the queue's OOM retry link: "attempt 2 of RUN, half micro-batch" (backend/queue/links.py)
    golden_prompts: int | None = None  # prompts of the golden answers (backend/runs/golden.py); None: none yet
    swift_eval_base: str | None = None  # the base model's newest `workbench eval` score (backend/runs/evals.py)
    swift_eval_shown: bool = False  # a column of `workbench eval` scores: the run has eval results

    @property
    def best(self) -> Row | None:
        return next((row for row in self.rows if row.best), None)

    def basis_text(self) -> str:
        if self.basis == "eval":
            return f"{'highest' if self.metric.greater_is_better else 'lowest'} {self.metric.label}"
        return f"lowest train loss (this run has no {self.metric.label} at any checkpoint)"

    def reason(self, row: Row) -> str:
        """Why a row is the best: 'checkpoint-6: lowest eval loss 1.23'."""
        value = row.eval_value if self.basis == "eval" else row.train_loss
        kind = self.basis_text().split(" (")[0]
        return f"{row.name}: {kind} {value:.4g}" + ("" if self.basis == "eval" else " (no evaluation in this run)")

    def row(self, step: int) -> Row | None:
        return next((row for row in self.rows if row.step == step), None)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"run_id": self.run_id, "metric": self.metric.name, "metric_key": self.metric.key,
                "greater_is_better": self.metric.greater_is_better, "basis": self.basis,
                "best_step": best.step if best else None, "best_reason": self.reason(best) if best else None,
                "problems": self.problems, "gone_steps": self.gone_steps,
                "attempt": self.attempt or None, "golden_prompts": self.golden_prompts,
                "swift_eval_base": self.swift_eval_base,
                "rows": [row.to_dict() for row in self.rows]}


# ---------------------------------------------------------------- reading the events


@dataclass
class _Events:
    logs: dict[int, float | None] = field(default_factory=dict)  # step -> rank-0 loss (the last written)
    evals: dict[int, float | None] = field(default_factory=dict)  # step -> the metric
    saved: set[int] = field(default_factory=set)  # steps of Checkpoint events
    damaged: dict[str, set[int]] = field(default_factory=lambda: {"log": set(), "eval": set()})
    bad_lines: int = 0
    long_lines: int = 0  # lines over the tail's bound (damaged too)
    newer_version: int | None = None


_LOCK = threading.Lock()  # the caches below, and a scoreboard being built from them
_EVENTS_CACHE: dict[tuple[str, str], tuple[tuple[int, int], Tail, _Events]] = {}
_COMPLETE_CACHE: dict[str, tuple[tuple[int, ...], int]] = {}
_MAX_CACHED = 4096


def _read_events(path: Path, metric: Metric) -> _Events:
    """The run's events as far as they are written; what was read before (the same file, not shorter) is
    kept and only the lines appended since are read (the monitor redraws the scoreboard as a run goes on)."""
    key = (str(path), metric.key)
    try:
        stat = path.stat()
        identity = (stat.st_dev, stat.st_ino)
    except OSError:
        return _Events()
    cached = _EVENTS_CACHE.get(key)
    if cached is not None and cached[0] == identity and stat.st_size >= cached[1].offset:
        tail, found = cached[1], cached[2]
    else:
        tail, found = Tail(path), _Events()
        if len(_EVENTS_CACHE) >= 64:
            _EVENTS_CACHE.clear()
        _EVENTS_CACHE[key] = (identity, tail, found)
    while True:
        before = tail.offset
        block = tail.read_block()
        if tail.offset == before:
            break
        decoded = decode_lines(block)
        if decoded.bad_lines or decoded.newer_version is not None:
            for raw in block.split(b"\n"):
                if raw.strip():
                    _note(found, raw, metric)
        else:
            for event in decoded.events:
                _take(found, event, metric)
    found.long_lines = tail.long_lines
    return found


def _take(found: _Events, event: Any, metric: Metric) -> None:
    if isinstance(event, Log) and event.rank == 0 and event.step is not None:
        found.logs[event.step] = event.loss
    elif isinstance(event, Eval) and event.rank == 0 and event.step is not None and metric.key in event.metrics:
        found.evals[event.step] = event.metrics[metric.key]
    elif isinstance(event, Checkpoint) and event.step is not None:
        found.saved.add(event.step)


def _note(found: _Events, raw: bytes, metric: Metric) -> None:
    event = decode_line(raw)
    if event is not None:
        _take(found, event, metric)
        return
    version = line_version(raw)
    if version is not None and version > SCHEMA_VERSION:
        found.newer_version = max(version, found.newer_version or 0)
        return
    found.bad_lines += 1
    kind, step = _TYPE.search(raw), _STEP.search(raw)
    if kind and step and kind.group(1).decode() in found.damaged:
        found.damaged[kind.group(1).decode()].add(int(step.group(1)))


# ---------------------------------------------------------------- the folders


def _folder_size(folder: Path) -> int:
    """Bytes of every file under `folder`; FileNotFoundError when the folder itself is gone."""
    total = 0
    stack = [folder]
    first = True
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except FileNotFoundError:
            if first:
                raise
            continue
        first = False
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return total


def _problem(folder: Path) -> str | None:
    """checkpoint_problem, or FileNotFoundError when the folder vanished while it was read."""
    try:
        problem = checkpoint_problem(folder)
    except FileNotFoundError:
        raise
    except OSError as err:
        return f"{folder.name} cannot be read ({err.strerror or err})"
    if not folder.is_dir():
        raise FileNotFoundError(folder)
    return problem


def _judged(folder: Path) -> tuple[str | None, int]:
    """(checkpoint_problem, size on disk) of a checkpoint folder. A complete one is remembered by its
    folder's and its trainer_state.json's stat (the trainer writes that file last and never touches a
    saved checkpoint again), so a redraw does not judge it again."""
    folder_stat = folder.stat()
    try:
        state = (folder / "trainer_state.json").stat()
        stamp: tuple[int, ...] = (folder_stat.st_ino, folder_stat.st_mtime_ns, state.st_ino, state.st_mtime_ns,
                                  state.st_size)
    except OSError:
        stamp = ()
    cached = _COMPLETE_CACHE.get(str(folder))
    if stamp and cached is not None and cached[0] == stamp:
        return None, cached[1]
    problem = _problem(folder)
    used = _folder_size(folder)
    if problem is None and stamp:
        if len(_COMPLETE_CACHE) >= _MAX_CACHED:
            _COMPLETE_CACHE.clear()
        _COMPLETE_CACHE[str(folder)] = (stamp, used)
    return problem, used


def _step_of(folder: Path) -> int | None:
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- the scoreboard


def scoreboard(run: RunFolder, metric: Metric | None = None) -> Scoreboard:
    """The run's scoreboard, read from its folder alone."""
    metric = metric or metric_of(run)
    with _LOCK:
        return _scoreboard(run, metric)


def _scoreboard(run: RunFolder, metric: Metric) -> Scoreboard:
    board = Scoreboard(run.run_id, metric, attempt=attempt_text(run.path))
    events = _read_events(run.events_path, metric)
    if events.bad_lines + events.long_lines:
        board.problems.append(f"events.jsonl: {damaged_text(events.bad_lines + events.long_lines)}")
    if events.newer_version:
        board.problems.append(f"events.jsonl: {newer_format_text(events.newer_version)}")
    problem = pins_problem(run)
    if problem:
        board.problems.append(problem)
    pins = set(read_pins(run))
    folders: dict[int, Path] = {}
    for folder in run.checkpoints():
        step = _step_of(folder)
        if step is not None:
            folders[step] = folder
    # pinned: in pins.json AND its copy is there (a copy deleted by hand protects nothing: not said pinned)
    copies = {step: copy for step in pins if (copy := pinned_dir(run) / f"checkpoint-{step}").is_dir()}
    steps = sorted(set(folders) | set(copies))
    board.rows = [_row(step, folders.get(step), copies.get(step), step in copies) for step in steps]
    board.gone_steps = sorted(events.saved - set(steps))
    _align(board.rows, events)
    _choose_best(board)
    _add_golden(run, board)
    _add_swift_evals(run, board)
    return board


def _add_golden(run: RunFolder, board: Scoreboard) -> None:
    """The golden column, when the run has golden answers (#24)."""
    from backend.runs.golden import golden_dir, read_golden

    if not golden_dir(run).is_dir():
        return
    golden = read_golden(run, board.gone_steps)
    if not golden.sets:
        return
    board.golden_prompts = golden.count
    board.problems += golden.problems
    for row in board.rows:
        row.golden = golden.column(row.step)


def _add_swift_evals(run: RunFolder, board: Scoreboard) -> None:
    """The `workbench eval` column and the base model's score, when the run has eval results (#24)."""
    from backend.runs.evals import read_evals

    evals = read_evals(run)
    board.problems += evals.problems
    if not evals.by_step and evals.base is None:
        return
    board.swift_eval_shown, board.swift_eval_base = True, evals.base_text()
    for row in board.rows:
        row.swift_eval = evals.column(row.step)


def _row(step: int, folder: Path | None, copy: Path | None, pinned: bool) -> Row:
    name = f"checkpoint-{step}"
    candidates = [p for p in (folder, copy) if p is not None]
    for path in candidates:
        try:
            problem, used = _judged(path)
        except FileNotFoundError:
            continue
        return Row(step, name, path, "complete" if problem is None else "incomplete", problem, used,
                   pinned=pinned, pinned_only=path == copy)
    return Row(step, name, None, "gone", f"{name} vanished while it was read (deleted, or rotated away by "
               "save_total_limit)", pinned=pinned)


def _align(rows: list[Row], events: _Events) -> None:
    log_steps = sorted(s for s, loss in events.logs.items())
    losses = np.array([np.nan if events.logs[s] is None else events.logs[s] for s in log_steps], dtype=float)
    smooth = _debiased_ema(losses)
    eval_steps = sorted(events.evals)
    previous = 0
    for row in sorted(rows, key=lambda r: r.step):
        i = bisect_right(log_steps, row.step) - 1
        if i >= 0:
            row.train_step = log_steps[i]
            row.train_loss = None if np.isnan(losses[i]) else float(losses[i])
            row.train_loss_ema = None if np.isnan(smooth[i]) else float(smooth[i])
        since = row.train_step if row.train_step is not None else -1
        row.train_damaged = any(since < s <= row.step for s in events.damaged["log"])
        j = bisect_right(eval_steps, row.step) - 1
        if j >= 0 and eval_steps[j] > previous:
            row.eval_step, row.eval_value = eval_steps[j], events.evals[eval_steps[j]]
        since = row.eval_step if row.eval_step is not None else previous
        row.eval_damaged = any(since < s <= row.step for s in events.damaged["eval"])
        previous = row.step


def _debiased_ema(losses: np.ndarray) -> np.ndarray:
    """The monitor's smoothing (backend.series.ema, debiased as TensorBoard does); missing losses skipped."""
    out = np.full(len(losses), np.nan)
    known = ~np.isnan(losses)
    if known.any():
        raw, _ = ema(losses[known], SMOOTHING)
        counts = np.arange(1, int(known.sum()) + 1)
        out[known] = raw / (1 - SMOOTHING ** counts)
    return out


def _choose_best(board: Scoreboard) -> None:
    usable = [r for r in board.rows if r.complete]
    scored = [r for r in usable if r.eval_value is not None and not r.eval_damaged]
    if scored:
        board.basis = "eval"
        pick = (max if board.metric.greater_is_better else min)(scored, key=lambda r: (r.eval_value, -r.step))
    else:
        board.basis = "train"
        trained = [r for r in usable if r.train_loss is not None and not r.train_damaged]
        if not trained:
            return
        pick = min(trained, key=lambda r: (r.train_loss, -r.step))
    pick.best = True


# ---------------------------------------------------------------- as text


HEADERS = ("", "checkpoint", "train loss", "loss EMA", "{metric}", "size", "pinned", "state")


def cells(board: Scoreboard, row: Row) -> tuple[str, ...]:
    """The texts of one row, in HEADERS' order (the CLI table and the monitor's panel both draw these)."""
    golden = (row.golden or "-",) if board.golden_prompts is not None else ()  # after the metric, when answered
    evaluated = (row.swift_eval or "-",) if board.swift_eval_shown else ()
    return ("*" if row.best else "", row.name, row.train_text(), row.ema_text(), row.eval_text(), *golden, *evaluated,
            row.size_text(), ("pinned (only copy)" if row.pinned_only else "pinned") if row.pinned else "",
            row.state_text())


def headers(board: Scoreboard) -> tuple[str, ...]:
    named = [h.format(metric=board.metric.label) for h in HEADERS]
    if board.golden_prompts is not None:  # only for a run with golden answers
        named.insert(5, "golden")
    if board.swift_eval_shown:  # only for a run with `workbench eval` results
        named.insert(6 if board.golden_prompts is not None else 5, "swift eval")
    return tuple(named)


def summary(board: Scoreboard) -> str:
    """One line: which checkpoint is best and why, or why none is (after the run's OOM retry link, if any)."""
    if board.attempt:
        return f"{board.attempt} · {summary(replace(board, attempt=''))}"
    if board.swift_eval_base:
        return f"{summary(replace(board, swift_eval_base=None))} · swift eval: {board.swift_eval_base}"
    best = board.best
    if best is not None:
        return f"best: {board.reason(best)}"
    if not board.rows:
        return "no checkpoint yet (checkpoints appear every training.save_steps steps and at the end)"
    return "no best checkpoint: no complete checkpoint has a train or eval loss recorded"


def table_lines(board: Scoreboard) -> list[str]:
    """The table alone: the header line, then one line per row (columns padded to their widest cell)."""
    table = [headers(board), *(cells(board, row) for row in board.rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]


def text_lines(board: Scoreboard) -> list[str]:
    """The scoreboard as plain text lines: the summary, the table, what else is worth knowing."""
    lines = [summary(board), "", *table_lines(board)]
    if board.gone_steps:
        steps = ", ".join(str(s) for s in board.gone_steps)
        lines.append(f"saved earlier, deleted since (save_total_limit's rotation, or by hand): step {steps}")
    lines += board.problems
    return lines
