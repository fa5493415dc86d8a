"""The worker of an eval job (backend/evaluation/job.py), in the job's own subprocess.

`python -m backend.evaluation.worker PLAN.json` runs `swift eval` once per model of the plan (the base
model, then the tuned one), each in a child process, and writes the job's `eval.json` from EvalScope's
reports. `python -m backend.evaluation.worker --swift-eval ARGS...` is that child: swift's own
`eval_main`, with one change: ms-swift 4.6 lists OpenCompass's datasets while it checks `--eval_dataset`
even for EvalScope's Native back end, which fails without OpenCompass installed (an extra that would pin
numpy 1.x); here only the Native benchmarks are listed (tests/test_private_internals.py watches it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from backend.core.collector import paused_while_loading, skip_last_collections
from backend.core.fs import LockTimeout, file_lock, write_text_atomic
from backend.core.paths import data_dir
from backend.evaluation.job import SUBSET
from backend.evaluation.results import RESULT_NAME
from backend.jobs.job import PROGRESS_PREFIX
from backend.launch.nodes import free_port

PORT_TRIES = 50


@contextlib.contextmanager
def reserved_port(probe: Callable[[], int] = free_port) -> Iterator[int]:
    """A free port (`probe`: one the OS says is free now) held for this worker until the block ends:
    `<data dir>/ports/<port>.lock` is flocked, and a port another eval's worker holds is never given out, so
    two evals at once never hand swift the same port between the probe and swift's own bind."""
    folder = data_dir() / "ports"
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        for _ in range(PORT_TRIES):
            port = probe()
            try:
                held.enter_context(file_lock(folder / f"{port}.lock", wait=0.0))
            except LockTimeout:
                continue  # another eval holds it until its swift has finished with it
            yield port
            return
    raise RuntimeError(f"no free port for swift's deploy server after {PORT_TRIES} tries")


def swift_argv(plan: dict[str, Any], model: dict[str, Any], output: Path, port: int) -> list[str]:
    benchmark = plan["benchmark"]
    dataset_args: dict[str, Any] = {"local_path": plan["data_dir"], "subset_list": [SUBSET]}
    if benchmark == "general_qa":
        dataset_args["metric_list"] = ["Rouge"]  # BLEU needs NLTK's punkt data, a download
    generation = {"max_tokens": plan["max_new_tokens"], "temperature": 0.0}
    argv = [sys.executable, "-m", "backend.evaluation.worker", "--swift-eval", *model["args"],
            "--eval_backend", "Native", "--eval_dataset", benchmark,
            "--eval_dataset_args", json.dumps({benchmark: dataset_args}),
            "--eval_generation_config", json.dumps(generation), "--eval_num_proc", "1",
            "--eval_output_dir", str(output), "--result_path", str(output / "infer_result.jsonl"),
            "--host", "127.0.0.1", "--port", str(port)]
    if plan.get("limit"):
        argv += ["--eval_limit", str(plan["limit"])]
    return argv


def read_report(output: Path, benchmark: str, metric: str) -> tuple[float | None, dict[str, float], int | None]:
    """(main score, every metric's score, rows evaluated) from the EvalScope report under `output`; ReportError
    naming the file when it is there but not the report EvalScope writes."""
    reports = sorted(output.glob(f"native/*/reports/*/{benchmark}.json"))
    if not reports:
        return None, {}, None
    try:
        report = json.loads(reports[-1].read_text(encoding="utf-8"))
        metrics = {str(m["name"]).removeprefix("mean_"): float(m["score"]) for m in report.get("metrics", [])}
        score = metrics.get(metric, report.get("score"))
        counts = [int(m["num"]) for m in report.get("metrics", []) if "num" in m]
        return (None if score is None else float(score)), metrics, (max(counts) if counts else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ReportError(f"EvalScope's report {reports[-1]} cannot be read ({type(err).__name__}: {err})") from None


class ReportError(Exception):
    """An EvalScope report that is there but cannot be read (the message names the file and why)."""


def _evaluate(plan: dict[str, Any], model: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """One model's `swift eval` and its score: the result line of eval.json (its error said, never raised)."""
    output = job_dir / model["role"]
    with reserved_port() as port:
        argv = swift_argv(plan, model, output, port)
        print("+ " + " ".join(argv), flush=True)
        code = subprocess.call(argv, cwd=job_dir)
    score: float | None = None
    metrics: dict[str, float] = {}
    rows: int | None = None
    error: str | None = None
    try:
        score, metrics, rows = read_report(output, plan["benchmark"], plan["metric"])
    except ReportError as err:
        error = str(err)
    if code != 0:
        error = f"swift eval exited with {code}"
    elif error is None and score is None:
        error = f"swift eval wrote no EvalScope report under {output}"
    return {"role": model["role"], "label": model["label"], "step": model["step"], "merged": model["merged"],
            "score": None if error else score, "metrics": metrics, "error": error, "rows": rows}


def run_plan(plan_path: Path) -> int:
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    job_dir = plan_path.parent
    models = plan["models"]
    results = []
    evaluated = None
    for index, model in enumerate(models):
        print(f"{PROGRESS_PREFIX}{0.05 + 0.9 * index / len(models):.2f} swift eval of {model['label']}", flush=True)
        line = _evaluate(plan, model, job_dir)
        rows = line.pop("rows")
        evaluated = rows if rows is not None else evaluated
        results.append(line)
        error, score = line["error"], line["score"]
        print(f"workbench: {model['label']}: " + (error or f"{plan['metric']} {score:.4f}"), flush=True)
        if error:
            break
    result = {key: plan[key] for key in ("dataset", "format", "benchmark", "metric", "rows", "limit")}
    result.update(evaluated=evaluated, created_at=time.time(), models=results)
    write_text_atomic(job_dir / RESULT_NAME, json.dumps(result, indent=2))
    failed = [r for r in results if r["error"]]
    return 1 if failed or len(results) < len(models) else 0


def run_swift_eval(args: list[str]) -> None:
    with paused_while_loading():
        from evalscope.api.registry import BENCHMARK_REGISTRY
        from swift.arguments import EvalArguments
        from swift.pipelines import eval_main

    def native_only(eval_backend: str | None = None) -> dict[str, list[str]]:
        return {"Native": sorted(BENCHMARK_REGISTRY.keys())}

    EvalArguments.list_eval_dataset = staticmethod(native_only)
    eval_main(args)


def main() -> None:
    if sys.argv[1:2] == ["--swift-eval"]:
        run_swift_eval(sys.argv[2:])
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(run_plan(Path(sys.argv[1])))


if __name__ == "__main__":  # swift's deploy server is a spawned process: it imports this module again
    skip_last_collections()  # torch and swift loaded: the end takes ~1.5 s less (backend/core/collector.py)
    main()
