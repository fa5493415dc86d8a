"""What Python's cyclic collector costs a process that loads swift, and what backend/core/collector.py saves.

Each sample is a fresh interpreter that imports swift's training entry point and its inference engine (what the
trainer, the oracle's children and our chat, batch, golden and evaluation workers load), timed inside the child:
- load: the import, plain vs inside `paused_while_loading()`;
- end: the process's whole time minus its import (Python's teardown, plus the interpreter's own start, about
  0.05 s), plain vs with `skip_last_collections()`.
Modes are interleaved, so a busier moment hits both.

    .venv/bin/python bench/collector.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = """
import contextlib, sys, time
from backend.core.collector import paused_while_loading, skip_last_collections
if sys.argv[1] == "collector":
    skip_last_collections()
start = time.perf_counter()
with paused_while_loading() if sys.argv[1] == "collector" else contextlib.nullcontext():
    from swift.pipelines import sft_main  # noqa: F401
    from swift.infer_engine import TransformersEngine  # noqa: F401
print(time.perf_counter() - start)
sys.stdout.flush()
"""


def sample(mode: str) -> tuple[float, float]:
    """(load seconds, end seconds) of one child."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=REPO, capture_output=True, text=True, check=True)
    whole = time.perf_counter() - start
    loaded = float(done.stdout.strip().splitlines()[-1])
    return loaded, whole - loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    samples: dict[str, list[tuple[float, float]]] = {"plain": [], "collector": []}
    for _ in range(runs):
        for mode in samples:
            samples[mode].append(sample(mode))
    print(f"a process that loads swift's trainer and inference engine, median of {runs}:")
    for index, what in enumerate(("load", "end")):
        plain = statistics.median(s[index] for s in samples["plain"])
        ours = statistics.median(s[index] for s in samples["collector"])
        print(f"  {what}: Python's own {plain:.2f} s, backend/core/collector.py {ours:.2f} s  "
              f"ratio {ours / plain:.2f} ({plain - ours:.2f} s less)")


if __name__ == "__main__":
    main()
