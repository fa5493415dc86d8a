"""What does inspecting a dataset through the workbench cost, beside swift alone?

10,000 chat rows (messages format, lengths varied) are inspected three ways, each in a fresh process,
alternating:
  swift:      a child Python that runs swift's own `load_dataset` + `get_template(...).encode` on
              every row (what `swift sft` does before training), nothing else;
  workbench:  `ask_report` of the `swift_data` oracle, cache bypassed (the child loads with swift,
              encodes every row, observes drops, maps lines, computes the report);
  cached:     `ask_report` again in the same process (the TUI, validate): file sizes and times
              unchanged, no hashing; and `cached_report` from a new process (the CLI's case):
              library versions, a hash of the file, the JSON read.
Prints the medians, the overhead workbench / swift (goal: under 1.10) and the cached time (goal:
under 50 ms).

    .venv/bin/python bench/data_inspect_bench.py [--rows 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.data.swift_view import DataRequest, ask_report  # noqa: E402
from backend.models.demo.build import ensure_builtin_model  # noqa: E402

SWIFT_ALONE = """
import sys, time
from swift import get_processor, get_template
from swift.dataset import load_dataset
model, path = sys.argv[1], sys.argv[2]
train, _ = load_dataset([path], num_proc=1, load_from_cache_file=False)
template = get_template(get_processor(model, model_type="qwen2"), template_type="qwen", max_length=None)
template.set_mode("train")
lengths = [len(template.encode(row)["input_ids"]) for row in train]
print(len(lengths), sum(lengths))
"""

WORDS = ("the model learns what the data shows it, token by token, so look at the data before "
         "you spend a GPU hour on it and check which tokens carry the loss").split()


def write_rows(path: Path, rows: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(rows):
            question = " ".join(rng.choices(WORDS, k=rng.randint(4, 40)))
            answer = " ".join(rng.choices(WORDS, k=rng.randint(8, 120)))
            handle.write(json.dumps({"messages": [{"role": "user", "content": f"{i}: {question}?"},
                                                  {"role": "assistant", "content": answer}]}) + "\n")


def swift_alone(model: Path, data: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", SWIFT_ALONE, str(model), str(data)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    return time.perf_counter() - started


def workbench(request: DataRequest, refresh: bool) -> tuple[float, dict]:
    started = time.perf_counter()
    report = ask_report(request, refresh=refresh)
    return time.perf_counter() - started, report


FRESH_CACHED = """
import json, sys, time
started = time.perf_counter()
from backend.data.swift_view import DataRequest, cached_report
report = cached_report(DataRequest(**json.loads(sys.argv[1])))
assert report is not None
print(time.perf_counter() - started)
"""


def fresh_process_cached(request: DataRequest) -> float:
    """The cached look from a new process (the CLI's case): imports, versions, file hash, JSON read."""
    from dataclasses import asdict

    done = subprocess.run([sys.executable, "-c", FRESH_CACHED, json.dumps(asdict(request))], check=True,
                          cwd=REPO, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="data-bench-") as tmp:
        os.environ.setdefault("WORKBENCH_CACHE_DIR", str(Path(tmp) / "cache"))
        model = ensure_builtin_model("tiny-qwen2")
        data = Path(tmp) / "rows.jsonl"
        write_rows(data, args.rows)
        request = DataRequest(refs=[str(data)], model=str(model), model_type="qwen2", template="qwen",
                              max_length=1024, sample_limit=max(args.rows, 20_000))
        alone, first = [], []
        report: dict = {}
        for _ in range(args.repeats):
            alone.append(swift_alone(model, data))
            seconds, report = workbench(request, refresh=True)
            first.append(seconds)
        cached = [workbench(request, refresh=False)[0] for _ in range(5)]
        fresh = [fresh_process_cached(request) for _ in range(3)]
    data_report = report["datasets"][0]
    assert data_report["rows"] == args.rows and data_report["encoded"] == args.rows, data_report
    swift_s, first_s, cached_s = statistics.median(alone), statistics.median(first), statistics.median(cached)
    print(f"rows: {args.rows:,} (every row encoded; tokens p50 {data_report['token_lengths']['p50']}, "
          f"max {data_report['token_lengths']['max']})")
    print(f"swift alone (load_dataset + encode, fresh process): {swift_s:.2f} s  runs {[round(x, 2) for x in alone]}")
    print(f"workbench first look (swift_data, no cache):        {first_s:.2f} s  runs {[round(x, 2) for x in first]}")
    print(f"workbench cached look:                              {cached_s * 1000:.1f} ms  "
          f"runs {[round(x * 1000, 1) for x in cached]}")
    fresh_s = statistics.median(fresh)
    print(f"cached look from a new process (CLI):               {fresh_s * 1000:.1f} ms  "
          f"runs {[round(x * 1000, 1) for x in fresh]} (library versions + a hash of the file)")
    print(f"overhead workbench / swift: {first_s / swift_s:.3f} (goal < 1.10); cached look in the app: "
          f"{'under' if cached_s < 0.05 else 'OVER'} 50 ms")


if __name__ == "__main__":
    main()
