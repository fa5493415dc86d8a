"""Hand-made golden answers (#24): a run folder with checkpoints 2 and 4 (tests/scoreboard/scoreboard_helpers.py)
and answers files in batch inference's results format, written as a golden job writes them."""

from __future__ import annotations

import json
from pathlib import Path

from backend.rundir.layout import RunFolder
from tests.scoreboard.scoreboard_helpers import evaluation, fake_run, log, saved

EVENTS = [log(2, 3.0), evaluation(2, eval_loss=2.5), saved(2), log(4, 1.0), evaluation(4, eval_loss=1.5), saved(4)]
# (prompt, reference): the Quill facts of the shipped self-cognition set; the third has no reference
PROMPTS = [("who are you?", "I am Quill, a tiny model."), ("what is your name?", "My name is Quill."),
           ("say hello", None)]
ANSWERS = {"base": ["zq xv", "blah", "hi"],
           "checkpoint-2": ["I am Quill.", "blah", "hello"],
           "checkpoint-4": ["I am Quill, a tiny model.", "My name is Quill.", "hello"]}


def write_answers(run: RunFolder, name: str, answers: list[str], damaged: int | None = None,
                  prompts: list[tuple[str, str | None]] = PROMPTS) -> Path:
    """golden/<name>.jsonl; `damaged`: that row (from 0) written as a torn line."""
    lines = [json.dumps({"index": i, "prompt": p, "messages": [{"role": "user", "content": p}], "reference": r,
                         "answer": a, "tokens": [], "finish_reason": "stop"})
             for i, ((p, r), a) in enumerate(zip(prompts, answers, strict=True))]
    if damaged is not None:
        lines[damaged] = lines[damaged][:25]
    path = run.path / "golden" / f"{name}.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def golden_run(parent: Path, answers: dict[str, list[str]] = ANSWERS, **options: object) -> RunFolder:
    run = fake_run(parent, EVENTS, {2: True, 4: True})
    for name, texts in answers.items():
        write_answers(run, name, texts, **options)  # type: ignore[arg-type]
    return run
