"""Evaluate a run's checkpoint (and its base model, side by side) with ms-swift's own `swift eval`, as a job.

`swift eval` deploys the model with its own server and runs EvalScope (the optional extra
`finetune-workbench[eval]`) against it. Only EvalScope's local-file benchmarks are used, offline:

* question-answer (`general_qa`, scored by Rouge-L recall): a jsonl whose rows have `query` and
  `response` (or `question`/`answer`, or `messages` ending with the assistant's answer);
* multiple-choice (`general_mcq`, scored by accuracy): a jsonl whose rows have `question`, the choices
  `A`, `B`, ... and `answer` (a letter).

The user's file is checked row by row (a bad row is named by its line number) and laid out in the job
folder the way EvalScope reads it (`data/eval.jsonl` or `data/eval_val.jsonl`), never next to the user's
file. A benchmark name that EvalScope would download (gsm8k, mmlu, ...) is refused: the hub is offline.

The job folder: `data/` (the laid-out dataset), `models/` (the tuned model hard-linked, because swift
writes its eval_result.jsonl into the checkpoint it evaluates), `base/` and `tuned/` (each model's
EvalScope output), `plan.json` (what the worker runs) and, at the end, `eval.json` (backend/evaluation/results.py).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.checkpoints.pins import link_tree
from backend.checkpoints.targets import ModelTarget, TargetError, target_of_run
from backend.core.fs import write_text_atomic
from backend.data.files import bounded_lines, too_long
from backend.evaluation.results import RESULT_NAME
from backend.jobs.job import EvalFinish, JobFinishError, JobFolder, JobSpec, new_job_id, start_job
from backend.models.refs import local_path
from backend.profile import ProfileError
from backend.rundir.checkpoint_verdict import CHECKPOINT_NAME
from backend.rundir.layout import RunFolder
from backend.rundir.world import launch_base_dir

SUBSET = "eval"
PLAN_NAME = "plan.json"
BENCHMARKS = {"qa": "general_qa", "mcq": "general_mcq"}
METRICS = {"qa": "Rouge-L-R", "mcq": "acc"}
CHOICES = "ABCDEFGHIJ"
# environment of the swift eval child: nothing is asked of a hub
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "MODELSCOPE_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
PROGRESS_MARKERS: list[tuple[str, float, str]] = []  # the worker prints WORKBENCH_PROGRESS lines itself


class EvalRefused(Exception):
    """The evaluation was not started; the message says why and what to do instead."""


@dataclass
class EvalSettings:
    limit: int | None = None
    max_new_tokens: int = 64
    base: bool = True


@dataclass
class LaidOut:
    format: str  # qa | mcq
    rows: int
    folder: Path


# ---------------------------------------------------------------- the dataset


def check_dataset(ref: str) -> Path:
    """The local dataset file `ref` names; EvalRefused for a hub benchmark or a missing file."""
    path = Path(ref).expanduser()
    if path.is_file():
        return path.resolve()
    if path.exists():
        raise EvalRefused(f"--dataset: {ref} is not a file; pass a jsonl file of question-answer or "
                          "multiple-choice rows")
    if "/" not in ref and not path.suffix and _is_evalscope_benchmark(ref):
        raise EvalRefused(f"--dataset: {ref!r} is an EvalScope benchmark that is downloaded from a hub at run time, "
                          "and this workbench evaluates offline (HF_HUB_OFFLINE); nothing was started. Pass a local "
                          "jsonl file instead: question-answer rows {\"query\": ..., \"response\": ...} or "
                          "multiple-choice rows {\"question\": ..., \"A\": ..., \"B\": ..., \"answer\": \"A\"}")
    raise EvalRefused(f"--dataset: {ref} does not exist")


def _is_evalscope_benchmark(name: str) -> bool:
    spec = importlib.util.find_spec("evalscope")
    if spec is None or not spec.submodule_search_locations:
        return bool(re.fullmatch(r"[a-z0-9_]+", name))  # cannot tell without EvalScope: a bare name is one
    folder = Path(next(iter(spec.submodule_search_locations))) / "benchmarks" / name.lower()
    return folder.is_dir()


def read_rows(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(format, rows in EvalScope's shape) of a dataset file; EvalRefused naming every bad line (up to 5)."""
    if path.suffix != ".jsonl":
        raise EvalRefused(f"--dataset: {path} is not a .jsonl file; write one row per line: question-answer "
                          "{\"query\", \"response\"} or multiple-choice {\"question\", \"A\", \"B\", ..., \"answer\"}")
    rows: list[dict[str, Any]] = []
    formats: set[str] = set()
    bad: list[str] = []
    with open(path, "rb") as handle:  # line by line, each bounded as the training data's readers bound it
        for number, raw in bounded_lines(handle):
            if raw is None:
                bad.append(too_long(number))
                continue
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as err:
                bad.append(f"line {number}: not valid JSON ({err.args[0].split(':')[0]})")
                continue
            try:
                fmt, row = _row(data)
            except ValueError as err:
                bad.append(f"line {number}: {err}")
                continue
            formats.add(fmt)
            rows.append(row)
    if len(formats) > 1:
        bad.append("the file mixes question-answer and multiple-choice rows; keep one kind per file")
    if bad:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise EvalRefused(f"--dataset {path}: " + "; ".join(bad[:5]) + more)
    if not rows:
        raise EvalRefused(f"--dataset {path}: no rows")
    return formats.pop(), rows


def _row(data: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "A" in data or "B" in data:
        return "mcq", _mcq_row(data)
    if isinstance(data.get("messages"), list):
        messages = data["messages"]
        if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
            raise ValueError("messages must end with the assistant's answer (the reference)")
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise ValueError("every message needs a role and a text content")
        return "qa", {"messages": messages[:-1], "response": messages[-1]["content"]}
    query = data.get("query", data.get("question"))
    answer = data.get("response", data.get("answer"))
    if not isinstance(query, str) or not query.strip():
        raise ValueError("no question: a question-answer row needs a text `query` (or `question`)")
    if not isinstance(answer, str):
        raise ValueError("no reference answer: a question-answer row needs a text `response` (or `answer`)")
    row = {"query": query, "response": answer}
    if isinstance(data.get("system"), str):
        row["system"] = data["system"]
    return "qa", row


def _mcq_row(data: dict[str, Any]) -> dict[str, Any]:
    choices = []
    for letter in CHOICES:
        if letter not in data:
            break
        choices.append(letter)
    if len(choices) < 2:
        raise ValueError("a multiple-choice row needs at least the choices A and B (in order)")
    if not isinstance(data.get("question"), str) or not data["question"].strip():
        raise ValueError("a multiple-choice row needs a text `question`")
    if data.get("answer") not in choices:
        raise ValueError(f"`answer` must be one of the row's choices {', '.join(choices)}, not {data.get('answer')!r}")
    return {"question": data["question"], **{c: str(data[c]) for c in choices}, "answer": data["answer"]}


def lay_out(path: Path, folder: Path) -> LaidOut:
    """Write the checked rows where EvalScope's local loader looks: `<folder>/eval.jsonl` (question-answer,
    its test split) or `<folder>/eval_val.jsonl` (multiple-choice, its val split)."""
    fmt, rows = read_rows(path)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{SUBSET}.jsonl" if fmt == "qa" else f"{SUBSET}_val.jsonl"
    write_text_atomic(folder / name, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return LaidOut(fmt, len(rows), folder)


def dataset_of_run(run: RunFolder) -> str:
    """The run's profile's `[eval] dataset` (relative to the profile's folder); EvalRefused when unset."""
    try:
        ref = run.read_profile().eval.dataset
    except (ProfileError, OSError, ValueError) as err:
        raise EvalRefused(f"run {run.run_id}: its profile.toml cannot be read ({err})") from None
    if not ref:
        raise EvalRefused(f"no eval dataset: the profile of {run.run_id} sets no [eval] dataset (a local jsonl of "
                          "question-answer or multiple-choice rows); set it, or run: workbench eval "
                          f"{run.run_id} --dataset FILE")
    return str(local_path(ref, launch_base_dir(run.world_path)))


# ---------------------------------------------------------------- the job


def evalscope_missing() -> str | None:
    if importlib.util.find_spec("evalscope") is None:
        return ("EvalScope is not installed, and `swift eval` needs it: pip install 'finetune-workbench[eval]' "
                "(or: pip install 'evalscope>=1.0,<1.11')")
    return None


def _step_of(target: ModelTarget) -> int | None:
    found = CHECKPOINT_NAME.search(target.label)
    return int(found.group(1)) if found else None


def plan_eval(run: RunFolder, dataset: str, *, checkpoint: int | None = None, merged: bool = False,
              settings: EvalSettings | None = None) -> tuple[str, JobSpec, dict[str, Any]]:
    """(job id, spec, plan) of an evaluation; raises EvalRefused, writes nothing."""
    settings = settings or EvalSettings()
    missing = evalscope_missing()
    if missing:
        raise EvalRefused(missing)
    source = check_dataset(dataset)
    fmt, rows = read_rows(source)
    try:
        tuned = target_of_run(run.path, checkpoint=checkpoint, merged=merged)
    except TargetError as err:
        raise EvalRefused(str(err)) from None
    base = tuned.base() if settings.base else None
    if settings.base and base is None:
        raise EvalRefused(f"the base model of {tuned.label} is unknown (no args.json names it); pass --no-base")
    job_id = new_job_id("eval")
    models: list[dict[str, Any]] = [{"role": "base", "label": base.label, "step": None, "merged": False, "args": base.swift_args()}
                                    ] if base is not None else []
    models.append({"role": "tuned", "label": tuned.label, "step": _step_of(tuned), "merged": merged,
                   "args": tuned.swift_args(), "link": tuned.adapters[0] if tuned.adapters else tuned.model})
    plan = {"dataset": str(source), "format": fmt, "benchmark": BENCHMARKS[fmt], "metric": METRICS[fmt],
            "rows": len(rows), "limit": settings.limit, "max_new_tokens": settings.max_new_tokens,
            "models": models}
    job_dir = run.jobs_dir / job_id
    argv = [sys.executable, "-m", "backend.evaluation.worker", str(job_dir / PLAN_NAME)]
    which = f"{base.label} and {tuned.label}" if base else tuned.label
    spec = JobSpec(kind="eval", description=f"swift eval of {which} on {source.name}", argv=argv,
                   env=OFFLINE_ENV, cwd=str(job_dir), output=str(job_dir / RESULT_NAME),
                   progress_markers=PROGRESS_MARKERS, finish=EvalFinish(result=str(job_dir / RESULT_NAME)),
                   notes=[f"model: {tuned.label}", *([f"checkpoint: {tuned.reason}"] if tuned.reason else []),
                          f"base model: {base.label}" if base else "base model: not evaluated (--no-base)",
                          f"dataset: {source} ({len(rows)} {'question-answer' if fmt == 'qa' else 'multiple-choice'} "
                          f"rows{f', the first {settings.limit}' if settings.limit else ''}), "
                          f"EvalScope {BENCHMARKS[fmt]}, score {METRICS[fmt]}",
                          f"results: {job_dir / RESULT_NAME}"])
    return job_id, spec, plan


def start_eval(run: RunFolder, dataset: str, **options: Any) -> JobFolder:
    """Plan the evaluation, lay its dataset and model out in the job folder, start it; returns at once."""
    job_id, spec, plan = plan_eval(run, dataset, **options)
    job_dir = run.jobs_dir / job_id
    job_dir.mkdir(parents=True)
    try:
        lay_out(Path(plan["dataset"]), job_dir / "data")
        tuned = plan["models"][-1]
        link = Path(tuned.pop("link"))
        linked = job_dir / "models" / link.name
        try:
            link_tree(link, linked)  # swift writes eval_result.jsonl into what it evaluates: our copy, not the run's
        except OSError as err:  # e.g. rotation deleted the checkpoint meanwhile
            raise EvalRefused(f"could not take {link} for the evaluation ({err}); nothing was started") from None
        tuned["args"] = [str(linked) if arg == str(link) else arg for arg in tuned["args"]]
        plan["data_dir"] = str(job_dir / "data")
        write_text_atomic(job_dir / PLAN_NAME, json.dumps(plan, indent=2))
        return start_job(run.jobs_dir, spec, job_id=job_id)
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)  # not started: no half-made job folder is left
        raise


# ---------------------------------------------------------------- run by the job's supervisor


def finish_eval(data: EvalFinish) -> str:
    path = Path(data.result)
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise JobFinishError(f"swift eval ended without a readable {path} ({err})") from None
    parts = []
    for model in result["models"]:
        score = "no score" if model.get("score") is None else f"{model['score']:.3f}"
        parts.append(f"{model['label']} {score}")
    missing = [m["label"] for m in result["models"] if m.get("score") is None]
    if missing:
        raise JobFinishError(f"no score for {', '.join(missing)}: see the job's output.log")
    return f"{result['metric']}: " + ", ".join(parts) + f" ({result.get('evaluated', result['rows'])} rows)"

