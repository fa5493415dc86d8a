"""How much CPU does one reload of the runs list cost? (the TUI reloads it every 2 s; issue 22)

Makes two workspaces in a temporary folder: --finished finished runs (each with an events file of
--events log lines, longer than the 64 KiB a summary reads) and --damaged damaged run folders
(run.json, and a state.json missing or not JSON). In a fresh process per workspace it times, in CPU
seconds, the first reload and the median of the next --repeats (what the list costs every 2 s while
nothing changes). A reload is what the runs screen's worker does: through the summaries cache
(backend/runs/summaries.py) where the code has it, else `list_runs()` and `summarize()` of each.

    .venv/bin/python bench/runs_list_bench.py [--old /tmp/old-d] [--finished 200] [--damaged 500]

`--old TREE` runs the same measure with TREE's backend first (a `git worktree` of the old code)
and prints the ratios. Goals: a reload of 200 finished runs <= 20 ms, of 500 damaged <= 200 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOALS = {"finished": 0.020, "damaged": 0.200}


def make_finished(workspace: Path, runs: int, events: int) -> None:
    for i in range(runs):
        folder = workspace / f"20260101-{i:05d}-bench-{i:04x}"
        folder.mkdir(parents=True)
        _identity(folder)
        (folder / "state.json").write_text(json.dumps({
            "run_id": folder.name, "profile_name": f"bench{i}", "status": "finished", "host": socket.gethostname(),
            "created_at": 1_790_000_000.0 + i, "started_at": 1_790_000_001.0 + i, "ended_at": 1_790_000_900.0 + i,
            "exit_code": 0}))
        lines = (json.dumps({"v": 1, "type": "log", "rank": 0, "time": 1_790_000_001.0 + s, "step": s + 1,
                             "max_steps": events, "epoch": s / events, "loss": 2.0 / (s + 1),
                             "learning_rate": 1e-4, "grad_norm": 0.5, "token_acc": 0.5, "nonfinite": [],
                             "steps_per_second": 3.0, "rss_bytes": 2**30}) + "\n" for s in range(events))
        (folder / "events.jsonl").write_text("".join(lines))


def make_damaged(workspace: Path, runs: int) -> None:
    for i in range(runs):
        folder = workspace / f"20260102-{i:05d}-damaged-{i:04x}"
        folder.mkdir(parents=True)
        _identity(folder)
        if i % 2:
            (folder / "state.json").write_text("{not json")


def _identity(folder: Path) -> None:
    (folder / "run.json").write_text(json.dumps({"kind": "finetune-workbench run", "run_id": folder.name,
                                                 "created_at": 1_790_000_000.0, "host": socket.gethostname()}))


# ---------------------------------------------------------------- in the measuring process


def one_reload_function():
    """What the runs screen does once per reload, with the code on sys.path."""
    try:
        from backend.runs.summaries import SummaryCache
    except ImportError:  # the code before the cache
        from backend.runs.lookup import list_runs
        from backend.runs.summaries import summarize

        return lambda: [summarize(run) for run in list_runs()]
    cache = SummaryCache()
    return lambda: cache.reload().summaries


def measure(repeats: int) -> dict[str, float | int | str]:
    import backend

    reload = one_reload_function()
    start = time.process_time()
    listed = len(reload())
    first = time.process_time() - start
    steady = []
    for _ in range(repeats):
        start = time.process_time()
        reload()
        steady.append(time.process_time() - start)
    return {"code": str(Path(backend.__file__).parents[1]), "runs": listed, "first_s": first,
            "reload_s": statistics.median(steady)}


# ---------------------------------------------------------------- the driver


def run_child(tree: Path, data: Path, workspace: Path, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "WORKBENCH_DATA_DIR": str(data),
           "WORKBENCH_WORKSPACE": str(workspace)}
    done = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(repeats)], env=env,
                          capture_output=True, text=True, cwd=tree)
    if done.returncode:
        raise SystemExit(f"the measure with {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, help="a tree with the old code (git worktree add /tmp/old-d COMMIT)")
    parser.add_argument("--finished", type=int, default=200)
    parser.add_argument("--damaged", type=int, default=500)
    parser.add_argument("--events", type=int, default=1000, help="log lines per finished run (~200 B each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return
    trees = ([("old", args.old.resolve())] if args.old else []) + [("new", REPO)]
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="runs-list-bench-") as tmp:
        root = Path(tmp)
        make_finished(root / "finished", args.finished, args.events)
        make_damaged(root / "damaged", args.damaged)
        for workspace in (root / "finished", root / "damaged"):  # made an hour ago, as a user's runs are
            os.utime(workspace, (time.time() - 3600, time.time() - 3600))
        for kind, count in (("finished", args.finished), ("damaged", args.damaged)):
            for label, tree in trees:
                got = run_child(tree, root / f"data-{kind}-{label}", root / kind, args.repeats)
                assert got["runs"] == count, f"{label} listed {got['runs']} of {count} {kind} runs"
                results.setdefault(kind, {})[label] = got
                print(f"{kind:8} {count:4} runs  {label}: first reload {got['first_s'] * 1000:8.1f} ms CPU, "
                      f"then {got['reload_s'] * 1000:8.1f} ms CPU a reload  ({got['code']})")
            if "old" in results[kind]:
                old, new = results[kind]["old"], results[kind]["new"]
                print(f"{'':8} ratio old/new: first {old['first_s'] / max(new['first_s'], 1e-6):.1f}x, "
                      f"reload {old['reload_s'] / max(new['reload_s'], 1e-6):.1f}x")
            goal = GOALS[kind]
            verdict = "ok" if results[kind]["new"]["reload_s"] <= goal else "OVER"
            print(f"{'':8} goal: a reload <= {goal * 1000:.0f} ms CPU: {verdict}")


if __name__ == "__main__":
    main()
