"""Batch inference over a dataset into a results jsonl: one line per row, prompt / reference / answer.

The job half (plan, start, finish; no torch) runs in the CLI or TUI. The worker half,
`python -m backend.inference.batch ...`, runs in the job's subprocess: it loads the rows
(jsonl files of `messages` directly, every other format with swift's own dataset loader,
so whatever swift trains on works), answers them with
`TransformersEngine` and appends one line per row to `<out>.partial`; the supervisor renames
that to `<out>` once every row is done. An existing results file is never overwritten.

Each line: {"index", "prompt" (the last user message), "messages" (what the model saw),
"reference" (the dataset's answer, or null), "answer", "tokens" (answer token ids),
"finish_reason"}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.checkpoints.targets import ModelTarget, target_of_run
from backend.core.collector import paused_while_loading, skip_last_collections
from backend.core.paths import is_builtin, looks_local
from backend.jobs.job import PROGRESS_PREFIX, InferFinish, JobFinishError, JobFolder, JobSpec, new_job_id, start_job
from backend.models.refs import resolve_dataset
from backend.rundir.layout import RunFolder

RESULTS_NAME = "results.jsonl"


class InferRefused(Exception):
    """Batch inference was not started; the message says why and what to pass instead."""


@dataclass
class InferSettings:
    max_new_tokens: int = 256
    temperature: float = 0.0  # greedy by default: the same checkpoint gives the same answers
    top_p: float = 1.0
    batch_size: int = 4
    limit: int | None = None


@dataclass
class ResultRow:
    index: int
    prompt: str
    reference: str | None
    answer: str
    finish_reason: str | None


def validation_sources(run: RunFolder) -> list[str]:
    """The run's validation data: its val datasets, or the split swift held out of train."""
    args_path = run.output_dir / "args.json"
    args = json.loads(args_path.read_text(encoding="utf-8")) if args_path.is_file() else {}
    if args.get("val_dataset"):
        return list(args["val_dataset"])
    held_out = run.output_dir / "val_dataset.jsonl"  # written by swift when split_dataset_ratio > 0
    if held_out.is_file():
        return [str(held_out)]
    raise InferRefused(f"run {run.run_id} has no validation split (its profile has data.val empty and "
                       "data.split_dataset_ratio 0); pass --dataset FILE (any dataset file swift reads), or "
                       "set data.val or data.split_dataset_ratio in the profile for the next run")


def plan_infer(run: RunFolder, *, dataset: list[str] | None = None, out: Path | None = None,
               checkpoint: int | None = None, merged: bool = False,
               settings: InferSettings | None = None, target: ModelTarget | None = None) -> tuple[str, JobSpec]:
    """(job id, job spec) of a batch inference over `dataset` (default: the run's validation split), answered
    by the run's checkpoint (or merged model), or by `target` when given (an export's parity check)."""
    settings = settings or InferSettings()
    sources = [_resolve_source(ref) for ref in dataset] if dataset else validation_sources(run)
    target = target or target_of_run(run.path, checkpoint=checkpoint, merged=merged)
    job_id = new_job_id("infer")
    out = Path(out).expanduser().resolve() if out else run.jobs_dir / job_id / RESULTS_NAME
    if out.exists():
        raise InferRefused(f"--out: {out} already exists; results are never overwritten, choose another file")
    partial = out.with_name(out.name + ".partial")
    argv = [sys.executable, "-m", "backend.inference.batch", *target.worker_args(), "--dataset", *sources,
            "--out", str(partial), "--max-new-tokens", str(settings.max_new_tokens),
            "--temperature", repr(settings.temperature), "--top-p", repr(settings.top_p),
            "--batch-size", str(settings.batch_size)]
    if settings.limit:
        argv += ["--limit", str(settings.limit)]
    spec = JobSpec(kind="infer", description=f"answer {', '.join(Path(s).name for s in sources)} with {target.label}",
                   argv=argv, cwd=str(Path(__file__).resolve().parents[2]), output=str(out),
                   finish=InferFinish(partial=str(partial), out=str(out)),
                   notes=[f"model: {target.label}", *([f"checkpoint: {target.reason}"] if target.reason else []),
                          f"dataset: {', '.join(sources)}", f"results: {out}"])
    return job_id, spec


def _resolve_source(ref: str) -> str:
    """A dataset file made absolute (a built-in name resolved); a hub dataset id as it is."""
    if is_builtin(ref):
        try:
            return resolve_dataset(ref)
        except KeyError as err:
            raise InferRefused(f"--dataset: {err.args[0]}") from None
    path = Path(ref).expanduser()
    if path.exists():
        return str(path.resolve())
    if looks_local(ref) or path.suffix in (".jsonl", ".json", ".csv"):
        raise InferRefused(f"--dataset: {ref} does not exist")
    return ref


def start_infer(run: RunFolder, **options: Any) -> JobFolder:
    """Plan and start batch inference as a job of the run; returns its job folder at once."""
    job_id, spec = plan_infer(run, **options)
    Path(spec.output).parent.mkdir(parents=True, exist_ok=True)
    return start_job(run.jobs_dir, spec, job_id=job_id)


def finish_infer(data: InferFinish) -> str:
    partial, out = Path(data.partial), Path(data.out)
    if not partial.is_file():
        raise JobFinishError(f"the inference ended without writing {partial}")
    if out.exists():
        raise JobFinishError(f"{out} appeared while the job ran; it was kept and the new results left in {partial}")
    os.rename(partial, out)
    rows = sum(1 for line in out.read_text(encoding="utf-8").splitlines() if line.strip())
    return f"{rows} answers written to {out}"


def read_results(path: Path) -> list[ResultRow]:
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            rows.append(ResultRow(data["index"], data["prompt"], data.get("reference"), data["answer"],
                                  data.get("finish_reason")))
    return rows


# ---------------------------------------------------------------- the worker (own subprocess)


def split_row(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """(the conversation up to the last answer, that answer) of one dataset row."""
    if messages and messages[-1]["role"] == "assistant":
        return messages[:-1], messages[-1]["content"]
    return messages, None


def read_messages_file(source: str) -> list[list[dict[str, Any]]] | None:
    """The conversations of a local jsonl whose every row has `messages`; None for anything else.

    Read here rather than by swift because swift saves its held-out split (val_dataset.jsonl)
    with each message as a JSON string, which its own loader then rejects."""
    path = Path(source)
    if path.suffix != ".jsonl" or not path.is_file():
        return None
    conversations = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            return None
        conversations.append([json.loads(m) if isinstance(m, str) else m for m in row["messages"]])
    return conversations


def load_conversations(sources: list[str]) -> list[list[dict[str, Any]]]:
    """Every row of every source as a list of messages; swift's loader for all other formats."""
    conversations: list[list[dict[str, Any]]] = []
    for source in sources:
        own = read_messages_file(source)
        if own is None:
            from swift.dataset import load_dataset

            rows, _ = load_dataset([source], split_dataset_ratio=0.0, shuffle=False, num_proc=1)
            own = [list(row["messages"]) for row in rows]
        conversations += own
    return conversations


def run_worker(args: argparse.Namespace) -> None:
    with paused_while_loading():
        from swift.infer_engine import InferRequest, RequestConfig, TransformersEngine

        conversations = load_conversations(args.dataset)[: args.limit or None]
        prompts = [split_row(messages) for messages in conversations]
        print(f"{PROGRESS_PREFIX}0.05 loading the model ({len(prompts)} rows)", flush=True)
        dtype = None
        if args.torch_dtype and args.torch_dtype != "auto":
            import torch

            dtype = getattr(torch, args.torch_dtype)
        engine = TransformersEngine(args.model, adapters=args.adapters or None, model_type=args.model_type,
                                    template_type=args.template, torch_dtype=dtype, max_batch_size=args.batch_size)
    config = RequestConfig(max_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                           return_details=True)
    with open(args.out, "a", encoding="utf-8") as out:
        for start in range(0, len(prompts), args.batch_size):
            batch = prompts[start:start + args.batch_size]
            responses = engine.infer([InferRequest(messages=messages) for messages, _ in batch], config,
                                     use_tqdm=False)
            for offset, ((messages, reference), response) in enumerate(zip(batch, responses, strict=True)):
                choice = response.choices[0]
                user = [m["content"] for m in messages if m["role"] == "user"]
                out.write(json.dumps({"index": start + offset, "prompt": user[-1] if user else "",
                                      "messages": messages, "reference": reference,
                                      "answer": choice.message.content, "tokens": choice.token_ids,
                                      "finish_reason": choice.finish_reason}) + "\n")
            out.flush()
            done = min(start + args.batch_size, len(prompts))
            print(f"{PROGRESS_PREFIX}{0.1 + 0.9 * done / max(1, len(prompts)):.3f} {done}/{len(prompts)} rows",
                  flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="workbench batch inference into a results jsonl")
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapters", nargs="*", default=[])
    parser.add_argument("--model-type", default=None)
    parser.add_argument("--template", default=None)
    parser.add_argument("--torch-dtype", default=None)
    parser.add_argument("--dataset", nargs="+", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--limit", type=int, default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    skip_last_collections()  # torch and swift loaded: the end takes ~1.5 s less (backend/core/collector.py)
    run_worker(parse_args())
