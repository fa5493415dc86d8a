"""The checkpoint scoreboard of a run: each checkpoint with its step, train loss at the save (and its
EMA), the evaluation aligned to it, its size on disk, complete or not, pinned or not; and the best one
by the profile's metric (`training.metric_for_best_model`, swift's `loss` = eval loss, lower is better
by default; the train loss's EMA when the run has no evaluation, and it says so: one logged train loss is one
noisy batch, the EMA beside it is steadier).

It reads only the run folder: events.jsonl through backend.contract.events and backend.core.tail, the checkpoint
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

import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.checkpoints.pins import pinned_dir, pins_problem, read_pins
from backend.checkpoints.saved_events import SavedEvents, read_saved_events
from backend.checkpoints.stats import judged, step_of
from backend.contract.events import damaged_text, newer_format_text
from backend.core.units import size
from backend.profile import ProfileError
from backend.rundir.layout import RunFolder
from backend.runs.attempts import attempt_text

_LOCK = threading.Lock()  # the read caches, and a scoreboard being built from them

# Columns of other features (golden prompts, swift eval), each filling its cells of a board being built;
# registered at start-up by backend.cli.wiring, so this room imports none of them.
Column = Callable[["RunFolder", "Scoreboard"], None]
COLUMNS: list[Column] = []


def register_column(column: Column) -> None:
    if column not in COLUMNS:
        COLUMNS.append(column)


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
    basis: str = "eval"  # eval: the metric of the evaluations; train: the train loss's EMA (no evaluation)
    problems: list[str] = field(default_factory=list)  # damaged or newer events lines
    gone_steps: list[int] = field(default_factory=list)  # saved (an event says so), folder no longer there
    attempt: str = ""  # the queue's OOM retry link: "attempt 2 of RUN, half micro-batch" (backend/runs/attempts.py)
    golden_prompts: int | None = None  # prompts of the golden answers (backend/golden/answers.py); None: none yet
    swift_eval_base: str | None = None  # the base model's newest `workbench eval` score (backend/evaluation/results.py)
    swift_eval_shown: bool = False  # a column of `workbench eval` scores: the run has eval results

    @property
    def best(self) -> Row | None:
        return next((row for row in self.rows if row.best), None)

    def basis_text(self) -> str:
        if self.basis == "eval":
            return f"{'highest' if self.metric.greater_is_better else 'lowest'} {self.metric.label}"
        return f"lowest train loss EMA (this run has no {self.metric.label} at any checkpoint)"

    def value(self, row: Row) -> float | None:
        """The value a row is judged by: its metric, or its train loss's EMA in a run without evaluation."""
        return row.eval_value if self.basis == "eval" else row.train_loss_ema

    def reason(self, row: Row) -> str:
        """Why a row is the best: 'checkpoint-6: lowest eval loss 1.23'."""
        kind = self.basis_text().split(" (")[0]
        return f"{row.name}: {kind} {self.value(row):.4g}" + (
            "" if self.basis == "eval" else " (no evaluation in this run; the EMA, not one noisy train loss)")

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


# ---------------------------------------------------------------- the scoreboard


def scoreboard(run: RunFolder, metric: Metric | None = None) -> Scoreboard:
    """The run's scoreboard, read from its folder alone."""
    metric = metric or metric_of(run)
    with _LOCK:
        return _scoreboard(run, metric)


def _scoreboard(run: RunFolder, metric: Metric) -> Scoreboard:
    board = Scoreboard(run.run_id, metric, attempt=attempt_text(run.path))
    events = read_saved_events(run.events_path, metric.key)
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
        step = step_of(folder)
        if step is not None:
            folders[step] = folder
    # pinned: in pins.json AND its copy is there (a copy deleted by hand protects nothing: not said pinned)
    copies = {step: copy for step in pins if (copy := pinned_dir(run) / f"checkpoint-{step}").is_dir()}
    steps = sorted(set(folders) | set(copies))
    world_size = run.world_size()
    board.rows = [_row(step, folders.get(step), copies.get(step), step in copies, world_size) for step in steps]
    board.gone_steps = sorted(events.saved - set(steps))
    _align(board.rows, events)
    _choose_best(board)
    for column in COLUMNS:  # golden prompts, swift eval: registered by their rooms (backend.cli.wiring)
        column(run, board)
    return board


def _row(step: int, folder: Path | None, copy: Path | None, pinned: bool, world_size: int | None) -> Row:
    name = f"checkpoint-{step}"
    candidates = [p for p in (folder, copy) if p is not None]
    for path in candidates:
        try:
            problem, used = judged(path, world_size)
        except FileNotFoundError:
            continue
        return Row(step, name, path, "complete" if problem is None else "incomplete", problem, used,
                   pinned=pinned, pinned_only=path == copy)
    return Row(step, name, None, "gone", f"{name} vanished while it was read (deleted, or rotated away by "
               "save_total_limit)", pinned=pinned)


if TYPE_CHECKING:
    import numpy as np


def _align(rows: list[Row], events: SavedEvents) -> None:
    import numpy as np  # here, not at the top: every command and the TUI register the scoreboard's columns as
    # they start (backend/cli/wiring.py), and numpy is ~0.1 s of a first frame that draws no scoreboard

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
    import numpy as np

    from backend.series import SMOOTHING, ema

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
        trained = [r for r in usable if r.train_loss_ema is not None and not r.train_damaged]
        if not trained:
            return
        pick = min(trained, key=lambda r: (r.train_loss_ema, -r.step))
    pick.best = True
