"""Warm answers: what an uncached library question costs within one run of the app.

In one process, as the app asks them (the app keeps a warm child when the service has one), in a
fresh oracle cache:
  shape 1, shape 2:  exact_shape() of two configs never asked before (transformers + PEFT);
  data 1, data 2:    ask_report() on two datasets never asked before (swift's loader + template,
                     the built-in tiny model).
The first of each pays the child's imports; with a warm child the second should not.
Prints seconds and the ratio second / first of each pair.

    .venv/bin/python bench/warm_answers.py [--label after]
    # the code before a change, from a worktree:  cd /tmp/old && PYTHONPATH=/tmp/old \\
    #     /work/main/.venv/bin/python bench/warm_answers.py --label before
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _timed(call) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _config_folder(root: Path, name: str, tiny: Path, hidden: int) -> Path:
    config = json.loads((tiny / "config.json").read_text())
    config.update(hidden_size=hidden, workbench_bench_nonce=f"{name}-{time.time_ns()}")
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _dataset(root: Path, name: str, words: str) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"{words} {i}?"},
                          {"role": "assistant", "content": f"{words} answer number {i}."}]} for i in range(40)]
    path = root / f"{name}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="warm-answers-"))
    os.environ["WORKBENCH_CACHE_DIR"] = str(root / "cache")

    from backend.data.swift_view import DataRequest, ask_report
    from backend.models.demo.build import ensure_builtin_model
    from backend.models.shape_exact import exact_shape
    from backend.oracle import runner

    tiny = ensure_builtin_model("tiny-qwen2")  # not timed: the app finds it built
    warm = hasattr(runner, "start_warm")
    if warm:
        runner.start_warm()  # what the app does when it mounts
    shapes = [_config_folder(root, f"shape{i}", tiny, hidden) for i, hidden in ((1, 96), (2, 128))]
    datasets = [_dataset(root, f"data{i}", words) for i, words in ((1, "What is blue"), (2, "Count to"))]

    def report(path: Path) -> None:
        ask_report(DataRequest(refs=[str(path)], model=str(tiny), model_type="qwen2", template="qwen",
                               max_length=512))

    try:
        times = {
            "shape 1": _timed(lambda: exact_shape(shapes[0])),
            "shape 2": _timed(lambda: exact_shape(shapes[1])),
            "data 1": _timed(lambda: report(datasets[0])),
            "data 2": _timed(lambda: report(datasets[1])),
        }
    finally:
        if warm:
            runner.stop_warm()
    label = f" ({args.label})" if args.label else ""
    print(f"warm answers{label}: {'a warm child' if warm else 'one child per question'}")
    for name, seconds in times.items():
        print(f"  {name:8s} {seconds:6.2f} s")
    print(f"  ratio shape 2 / shape 1: {times['shape 2'] / times['shape 1']:.2f}")
    print(f"  ratio data 2 / data 1:   {times['data 2'] / times['data 1']:.2f}")


if __name__ == "__main__":
    main()
