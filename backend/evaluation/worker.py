"""The worker of an eval job (backend/evaluation/job.py), in the job's own subprocess.

`python -m backend.evaluation.worker PLAN.json` runs `swift eval` once per model of the plan (the base
model, then the tuned one), each in a child process, and writes the job's `eval.json` from EvalScope's
reports. `python -m backend.evaluation.worker --swift-eval ARGS...` is that child: swift's own
`eval_main`, with one change: ms-swift 4.6 lists OpenCompass's datasets while it checks `--eval_dataset`
even for EvalScope's Native back end, which fails without OpenCompass installed (an extra that would pin
numpy 1.x); here only the Native benchmarks are listed (tests/test_private_internals.py watches it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend.core.fs import write_text_atomic
from backend.evaluation.job import SUBSET
from backend.evaluation.results import RESULT_NAME
from backend.jobs.job import PROGRESS_PREFIX


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def swift_argv(plan: dict[str, Any], model: dict[str, Any], output: Path) -> list[str]:
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
            "--host", "127.0.0.1", "--port", str(free_port())]
    if plan.get("limit"):
        argv += ["--eval_limit", str(plan["limit"])]
    return argv


def read_report(output: Path, benchmark: str, metric: str) -> tuple[float | None, dict[str, float], int | None]:
    """(main score, every metric's score, rows evaluated) from the EvalScope report under `output`."""
    reports = sorted(output.glob(f"native/*/reports/*/{benchmark}.json"))
    if not reports:
        return None, {}, None
    report = json.loads(reports[-1].read_text(encoding="utf-8"))
    metrics = {str(m["name"]).removeprefix("mean_"): float(m["score"]) for m in report.get("metrics", [])}
    score = metrics.get(metric, report.get("score"))
    counts = [int(m["num"]) for m in report.get("metrics", []) if "num" in m]
    return (None if score is None else float(score)), metrics, (max(counts) if counts else None)


def run_plan(plan_path: Path) -> int:
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    job_dir = plan_path.parent
    models = plan["models"]
    results = []
    evaluated = None
    for index, model in enumerate(models):
        print(f"{PROGRESS_PREFIX}{0.05 + 0.9 * index / len(models):.2f} swift eval of {model['label']}", flush=True)
        output = job_dir / model["role"]
        argv = swift_argv(plan, model, output)
        print("+ " + " ".join(argv), flush=True)
        code = subprocess.call(argv, cwd=job_dir)
        score, metrics, rows = read_report(output, plan["benchmark"], plan["metric"])
        error = None if code == 0 else f"swift eval exited with {code}"
        if code == 0 and score is None:
            error = f"swift eval wrote no EvalScope report under {output}"
        evaluated = rows if rows is not None else evaluated
        results.append({"role": model["role"], "label": model["label"], "step": model["step"],
                        "merged": model["merged"], "score": None if error else score, "metrics": metrics,
                        "error": error})
        print(f"workbench: {model['label']}: " + (error or f"{plan['metric']} {score:.4f}"), flush=True)
        if error:
            break
    result = {key: plan[key] for key in ("dataset", "format", "benchmark", "metric", "rows", "limit")}
    result.update(evaluated=evaluated, created_at=time.time(), models=results)
    write_text_atomic(job_dir / RESULT_NAME, json.dumps(result, indent=2))
    failed = [r for r in results if r["error"]]
    return 1 if failed or len(results) < len(models) else 0


def run_swift_eval(args: list[str]) -> None:
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
    main()
