"""The whole suite under a background load (#36): N busy processes on the same cores while the README's test
command runs, its wall time and the load average it ran under.

    .venv/bin/python bench/under_load.py [--load 8] [--repo PATH] [-- PYTEST ARGS]

`--repo` is the checkout whose suite runs (a fresh clone with its own `.venv`, as CI has); the burners are
plain Python busy loops at normal priority (as other sessions' work would be), started before
the suite and killed with their process group when it ends, however it ends. Prints the suite's last lines,
its failures section whole, its exit code, the wall time and the load average sampled every 30 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BURNERS = """
import multiprocessing, sys


def burn():
    while True:
        pass


if __name__ == "__main__":
    workers = [multiprocessing.Process(target=burn) for _ in range(int(sys.argv[1]))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
"""


def start_burners(count: int) -> subprocess.Popen[bytes]:
    """`count` busy loops in one process group of their own (one signal ends them all)."""
    burners = subprocess.Popen([sys.executable, "-c", BURNERS, str(count)], start_new_session=True)
    time.sleep(1)
    if burners.poll() is not None:
        raise SystemExit(f"the burners ended at once (exit {burners.returncode})")
    return burners


def sample_load(samples: list[float], stop: threading.Event) -> None:
    while not stop.wait(30):
        samples.append(os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=8, help="busy processes beside the suite (default 8)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose suite runs (its .venv)")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args()

    burners = start_burners(args.load)
    samples: list[float] = []
    stop = threading.Event()
    threading.Thread(target=sample_load, args=(samples, stop), daemon=True).start()
    start = time.monotonic()
    try:
        done = subprocess.run([str(args.repo / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider",
                               *args.pytest_args], cwd=args.repo, capture_output=True, text=True)
    finally:
        stop.set()
        os.killpg(burners.pid, signal.SIGKILL)
        burners.wait()
    wall = time.monotonic() - start
    lines = done.stdout.splitlines()
    failures = next((i for i, line in enumerate(lines) if line.startswith("=") and " FAILURES " in line), None)
    print("\n".join(lines[failures:failures + 400] if failures is not None else []))  # why, not only which
    print("\n".join(lines[-40:]))
    minutes, seconds = divmod(round(wall), 60)
    print(f"suite under a load of {args.load} busy processes: exit {done.returncode}, {minutes} min "
          f"{seconds:02d} s wall; load average (1 min) every 30 s: median "
          f"{statistics.median(samples) if samples else float('nan'):.1f}, min {min(samples, default=0):.1f}, "
          f"max {max(samples, default=0):.1f} ({len(samples)} samples) on {os.cpu_count()} cores")
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
