"""Golden prompts' answers of a run, read and compared (#24): the scoreboard's "golden" column and the
per-prompt view (`workbench checkpoints RUN --golden [--prompt K]`, `g` in the monitor's scoreboard).

    <run>/golden/prompts.jsonl        the profile's [eval] prompts, copied when first answered
    <run>/golden/base.jsonl           the base model's answers (step 0)
    <run>/golden/checkpoint-N.jsonl   checkpoint-N's answers (greedy; backend/golden/job.py)

Each answers file is batch inference's results format (backend/inference/batch.py: one line per
prompt, index / prompt / reference / answer). Comparisons: exact match (after stripping surrounding
white space) against the reference and against the answer of the checkpoint before, and a similarity:
difflib's SequenceMatcher ratio (0..1, 1 = the same text), said as such. Only files are read; no model.
A damaged line is named (file and line) and never hides the other answers.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.tail import FileMark, mark
from backend.rundir.layout import RunFolder

if TYPE_CHECKING:
    from backend.checkpoints.scoreboard import Scoreboard

GOLDEN_DIR = "golden"
PROMPTS_COPY = "prompts.jsonl"
BASE_NAME = "base"
_ANSWERS = re.compile(r"checkpoint-(\d+)\.jsonl")


def golden_dir(run: RunFolder) -> Path:
    return run.path / GOLDEN_DIR


def answers_path(run: RunFolder, step: int | None) -> Path:
    """Where the answers of checkpoint-`step` (None: the base model) live."""
    return golden_dir(run) / (f"{BASE_NAME}.jsonl" if step is None else f"checkpoint-{step}.jsonl")


def answered_steps(run: RunFolder) -> list[int]:
    """Steps of the checkpoints whose answers are written, in order."""
    try:
        names = [p.name for p in golden_dir(run).iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _ANSWERS.fullmatch(name)))


def similarity(a: str, b: str) -> float:
    """difflib's SequenceMatcher ratio of two texts: 1.0 the same, 0.0 nothing in common."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.strip() == b.strip()


@dataclass
class Answers:
    """One answers file read: answer per prompt index, and the lines that could not be read."""

    label: str  # base | checkpoint-N
    step: int  # 0 for the base model
    answers: dict[int, str] = field(default_factory=dict)
    prompts: dict[int, str] = field(default_factory=dict)
    references: dict[int, str | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


_CACHE: dict[str, tuple[FileMark, Answers]] = {}  # path -> its mark when read, what was read
_MAX_CACHED = 4096


def read_answers(path: Path, label: str, step: int) -> Answers:
    """An answers file; each damaged line is named ('golden/checkpoint-4.jsonl line 2: not JSON'). A file read
    before is taken from memory while its inode, mtime and size are the same (a job replaces a file whole,
    by a rename), so the monitor's redraws of a long run read only what changed."""
    stamp = mark(path)
    cached = _CACHE.get(str(path))
    if stamp is not None and cached is not None and cached[0] == stamp and cached[1].label == label:
        return cached[1]
    found = _read_answers(path, label, step)
    if stamp is not None:
        if len(_CACHE) >= _MAX_CACHED:
            _CACHE.clear()
        _CACHE[str(path)] = (stamp, found)
    return found


def _read_answers(path: Path, label: str, step: int) -> Answers:
    found = Answers(label, step)
    where = f"{path.parent.name}/{path.name}"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        found.problems.append(f"{where}: cannot be read ({err.strerror or err})")
        return found
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
            index, answer = row["index"], row["answer"]
            if not isinstance(index, int) or not isinstance(answer, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            found.problems.append(f"{where} line {number}: damaged (not an answer row: index, answer); "
                                  f"answer again with `workbench golden RUN{'' if step == 0 else f' --checkpoint {step}'}`")
            continue
        found.answers[index] = answer
        if isinstance(row.get("prompt"), str):
            found.prompts[index] = row["prompt"]
        reference = row.get("reference")
        found.references[index] = reference if isinstance(reference, str) else None
    return found


@dataclass
class Golden:
    """Every answers file of a run, in step order (the base model first, as step 0)."""

    run_id: str
    sets: list[Answers] = field(default_factory=list)
    prompts: dict[int, str] = field(default_factory=dict)
    references: dict[int, str | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)  # checkpoints saved, deleted before they were answered

    @property
    def count(self) -> int:
        return len(self.prompts)

    def at(self, step: int) -> Answers | None:
        return next((s for s in self.sets if s.step == step and s.label != BASE_NAME), None)

    def previous(self, answers: Answers) -> Answers | None:
        i = self.sets.index(answers)
        return self.sets[i - 1] if i > 0 else None

    def column(self, step: int) -> str:
        """The scoreboard's golden cell of checkpoint-`step`: '3/5 match ref', or with no references
        'changed 2 of 5 vs previous'; '-' not answered (yet)."""
        answers = self.at(step)
        if answers is None:
            return "-"
        with_ref = [i for i in self.prompts if self.references.get(i) is not None]
        damaged = " (damaged lines)" if answers.problems else ""
        if with_ref:
            matched = sum(1 for i in with_ref if same(answers.answers.get(i), self.references[i]))
            return f"{matched}/{len(with_ref)} match ref{damaged}"
        before = self.previous(answers)
        if before is None:
            return f"{len(answers.answers)} answered{damaged}"
        changed = sum(1 for i in self.prompts if i in answers.answers and i in before.answers
                      and not same(answers.answers[i], before.answers[i]))
        return f"changed {changed} of {self.count} vs {before.label}{damaged}"


def read_golden(run: RunFolder, gone_steps: list[int] | None = None) -> Golden:
    """The run's golden answers: the base model's, then each checkpoint's. `gone_steps`: checkpoints
    saved and deleted since (the scoreboard's), said "gone before answered" when they have no answers."""
    golden = Golden(run.run_id)
    base = answers_path(run, None)
    if base.is_file():
        golden.sets.append(read_answers(base, BASE_NAME, 0))
    for step in answered_steps(run):
        golden.sets.append(read_answers(answers_path(run, step), f"checkpoint-{step}", step))
    for answers in golden.sets:
        golden.problems += answers.problems
        for index, prompt in answers.prompts.items():
            golden.prompts.setdefault(index, prompt)
        for index, reference in answers.references.items():
            if golden.references.get(index) is None:
                golden.references[index] = reference
        for index in answers.answers:
            golden.prompts.setdefault(index, "?")
    golden.prompts = dict(sorted(golden.prompts.items()))
    answered = {s.step for s in golden.sets}
    golden.gone = sorted(s for s in (gone_steps or []) if s not in answered)
    return golden


# ---------------------------------------------------------------- the per-prompt view, as text


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def prompt_lines(golden: Golden, index: int) -> list[str]:
    """One prompt: its reference, then the base's answer and each checkpoint's, each said changed or
    unchanged against the one before, with exact match and similarity to the reference."""
    reference = golden.references.get(index)
    lines = [f"prompt {index + 1}: {_quoted(golden.prompts.get(index, '?'))}",
             f"  reference        {_quoted(reference) if reference is not None else '(none in the prompts file)'}"]
    before: str | None = None
    for answers in golden.sets:
        answer = answers.answers.get(index)
        if answer is None:
            lines.append(f"  {answers.label:<16} (no answer" + (": damaged line)" if answers.problems else ")"))
            continue
        notes = []
        if answers.label != BASE_NAME:
            notes.append("unchanged" if same(answer, before) else "changed")
        if reference is not None:
            notes.append("exact match" if same(answer, reference) else "no match")
            notes.append(f"similarity {similarity(answer.strip(), reference.strip()):.2f}")
        lines.append(f"  {answers.label:<16} {_quoted(answer)}" + (f"  [{', '.join(notes)}]" if notes else ""))
        before = answer
    return lines


def view_lines(golden: Golden, prompt: int | None = None) -> list[str]:
    """The per-prompt view: every prompt (or prompt number `prompt`, counted from 1)."""
    if not golden.sets:
        return [f"{golden.run_id}: no golden answers yet (set [eval] prompts in the profile; the run's supervisor "
                "answers each checkpoint, or run `workbench golden RUN`)"]
    head = (f"golden prompts of {golden.run_id}: {golden.count} prompt{'s' if golden.count != 1 else ''}, answered "
            f"by {', '.join(s.label for s in golden.sets)}; similarity: difflib ratio to the reference (1.00 = same)")
    lines = [head]
    indexes = list(golden.prompts)
    if prompt is not None:
        if not 1 <= prompt <= len(indexes):
            return [head, f"no prompt {prompt}: there are {len(indexes)} (1 to {len(indexes)})"]
        indexes = [indexes[prompt - 1]]
    for index in indexes:
        lines += ["", *prompt_lines(golden, index)]
    if golden.gone:
        lines += ["", *(f"checkpoint-{s}: gone before answered (deleted by rotation before its golden job ran)"
                        for s in golden.gone)]
    if golden.problems:
        lines += ["", *golden.problems]
    return lines


def add_golden_column(run: RunFolder, board: Scoreboard) -> None:
    """The golden column, when the run has golden answers (#24)."""
    if not golden_dir(run).is_dir():
        return
    golden = read_golden(run, board.gone_steps)
    if not golden.sets:
        return
    board.golden_prompts = golden.count
    board.problems += golden.problems
    for row in board.rows:
        row.golden = golden.column(row.step)
