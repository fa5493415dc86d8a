"""The results of a run's `swift eval` jobs (backend/evaluation/job.py), read back for the scoreboard.

Each finished eval job leaves one small `<run>/jobs/<job_id>/eval.json`:

    {"dataset": FILE, "format": "qa" | "mcq", "benchmark": "general_qa", "metric": "Rouge-L-R", "rows": N,
     "limit": N | null, "created_at": T,
     "models": [{"role": "base" | "tuned", "label": ..., "step": N | null, "merged": bool,
                 "score": X | null, "metrics": {name: X}, "error": str | null}]}

Only the run folder is read; a damaged file is named in `problems` and never hides the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.rundir.layout import RunFolder

if TYPE_CHECKING:
    from backend.checkpoints.scoreboard import Scoreboard

RESULT_NAME = "eval.json"


@dataclass
class EvalScore:
    score: float
    metric: str
    dataset: str
    created_at: float


@dataclass
class EvalResults:
    """The newest score per checkpoint step and of the base model, across the run's eval jobs."""

    by_step: dict[int, EvalScore] = field(default_factory=dict)
    base: EvalScore | None = None
    problems: list[str] = field(default_factory=list)

    def column(self, step: int) -> str | None:
        found = self.by_step.get(step)
        return None if found is None else f"{found.score:.3f}"

    def base_text(self) -> str | None:
        if self.base is None:
            return None
        return f"base {self.base.metric} {self.base.score:.3f} on {Path(self.base.dataset).name}"


def read_evals(run: RunFolder) -> EvalResults:
    """Every eval.json of the run's jobs, newest result winning per checkpoint (merged models count for the
    step they were merged from)."""
    results = EvalResults()
    jobs = run.jobs_dir
    if not jobs.is_dir():
        return results
    for path in sorted(jobs.glob(f"*/{RESULT_NAME}")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            _take(results, data)
        except (OSError, ValueError, KeyError, TypeError) as err:
            results.problems.append(f"{path}: damaged eval result ({err}); the other results are shown")
    return results


def _take(results: EvalResults, data: dict[str, Any]) -> None:
    created = float(data["created_at"])
    for model in data["models"]:
        if model.get("score") is None:
            continue
        score = EvalScore(float(model["score"]), str(data["metric"]), str(data["dataset"]), created)
        if model["role"] == "base":
            if results.base is None or results.base.created_at <= created:
                results.base = score
        elif model.get("step") is not None:
            step = int(model["step"])
            old = results.by_step.get(step)
            if old is None or old.created_at <= created:
                results.by_step[step] = score


def add_eval_column(run: RunFolder, board: Scoreboard) -> None:
    """The `workbench eval` column and the base model's score, when the run has eval results (#24)."""
    evals = read_evals(run)
    board.problems += evals.problems
    if not evals.by_step and evals.base is None:
        return
    board.swift_eval_shown, board.swift_eval_base = True, evals.base_text()
    for row in board.rows:
        row.swift_eval = evals.column(row.step)
