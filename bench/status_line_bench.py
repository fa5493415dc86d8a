"""How long does `workbench status --line` take? (tmux runs it every few seconds; goal < 100 ms)

Makes a workspace of --runs run folders (3 training, every tenth with alerts, events files of
--events lines), then times the real command end to end, against a bare `python -c pass`, and
prints the medians and what the status line adds to the interpreter's own start.

    .venv/bin/python bench/status_line_bench.py [--runs 300] [--events 5000] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKBENCH = Path(sys.executable).parent / "workbench"


def make_runs(root: Path, runs: int, events: int) -> None:
    for i in range(runs):
        folder = root / f"2026{i:05d}-bench-{i}"
        folder.mkdir(parents=True)
        active = i < 3
        (folder / "state.json").write_text(json.dumps({
            "run_id": folder.name, "profile_name": f"bench{i}", "status": "running" if active else "finished",
            "host": socket.gethostname(), "supervisor_pid": os.getpid() if active else None, "created_at": float(i)}))
        lines = (json.dumps({"v": 1, "type": "log", "rank": 0, "time": 1.0, "step": s, "max_steps": events * 2,
                             "loss": 1.0 / (s + 1), "steps_per_second": 3.0, "nonfinite": []}) + "\n"
                 for s in range(events if active else 50))
        (folder / "events.jsonl").write_text("".join(lines))
        if i % 10 == 0:
            (folder / "alerts.jsonl").write_text(json.dumps({"v": 1, "type": "alert", "id": str(i), "kind": "hang",
                                                             "step": 5, "time": 1.0, "message": "no progress"}) + "\n")


def timed(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, float, str]:
    """Median wall time and median CPU time (user + system: what a busy machine does not inflate)."""
    times, cpu, out = [], [], ""
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times), statistics.median(cpu), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_runs(root / "runs", options.runs, options.events)
        env = {**os.environ, "WORKBENCH_WORKSPACE": str(root / "runs"), "WORKBENCH_DATA_DIR": str(root / "data")}
        bare, bare_cpu, _ = timed([sys.executable, "-c", "pass"], env, options.repeats)
        line, line_cpu, out = timed([str(WORKBENCH), "status", "--line"], env, options.repeats)
    print(f"output: {out.strip()}")
    print(f"{options.runs} runs, medians: status --line {line * 1000:.0f} ms wall / {line_cpu * 1000:.0f} ms CPU; "
          f"bare python {bare * 1000:.0f} ms wall / {bare_cpu * 1000:.0f} ms CPU (goal: status --line < 100 ms)")


if __name__ == "__main__":
    main()
