"""How long a process that imported swift's training entry point takes to end, with and without
`backend.core.process_exit.skip_last_collections` (the trainer's plugin and our workers call it).

Each run starts a fresh interpreter that imports `swift.pipelines.sft_main` and then returns; the import
is timed inside the child, so the process's whole time minus its import is its end (Python's teardown, plus
the interpreter's own start, about 0.05 s).

    .venv/bin/python bench/process_end.py [--runs 3]
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
import sys, time
if sys.argv[1] == "skip":
    from backend.core.process_exit import skip_last_collections
    skip_last_collections()
start = time.perf_counter()
from swift.pipelines import sft_main  # noqa: F401
print(time.perf_counter() - start)
sys.stdout.flush()
"""


def end_seconds(mode: str) -> tuple[float, float]:
    """(import seconds, end seconds) of one child."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=REPO, capture_output=True, text=True, check=True)
    whole = time.perf_counter() - start
    imported = float(done.stdout.strip().splitlines()[-1])
    return imported, whole - imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    ends: dict[str, list[float]] = {"plain": [], "skip": []}
    for _ in range(runs):
        for mode in ends:  # interleaved: a busier moment hits both
            ends[mode].append(end_seconds(mode)[1])
    plain, skip = statistics.median(ends["plain"]), statistics.median(ends["skip"])
    print(f"end of a process that imported swift (its import excluded), median of {runs}:")
    print(f"  Python's own end:        {plain:.2f} s  {[round(s, 2) for s in ends['plain']]}")
    print(f"  skip_last_collections:   {skip:.2f} s  {[round(s, 2) for s in ends['skip']]}")
    print(f"  ratio: {skip / plain:.2f} ({plain - skip:.2f} s less for each trainer, worker or rank)")


if __name__ == "__main__":
    main()
