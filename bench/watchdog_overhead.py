"""Does the watchdog slow training down, and what does it cost?

Runs the same tiny LoRA training with `[watch] enabled = true` and `false`, alternating, logging
every step (the watchdog's worst case: one event per step), and prints the trainer's own steps/s
(`train_steps_per_second` from swift's logging.jsonl), their ratio (goal >= 0.99) and the
watchdog thread's own CPU time as a share of one core (goal < 1 %), from <run>/watch/status.json.

    .venv/bin/python bench/watchdog_overhead.py [--steps 200] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.core.paths import SHIPPED_PROFILES_DIR  # noqa: E402
from backend.models.refs import resolve_model  # noqa: E402
from backend.profile import load_profile, save_profile  # noqa: E402
from backend.runs.lookup import find_run  # noqa: E402
from backend.runs.status import refresh  # noqa: E402
from bench.runner_overhead import train_steps_per_second  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.setdefault("WORKBENCH_DATA_DIR", str(root / "data"))
        os.environ.setdefault("WORKBENCH_WORKSPACE", str(root / "runs"))
        resolve_model("builtin:tiny-qwen2", build=True)
        speeds: dict[bool, list[float]] = {True: [], False: []}
        cpu: list[float] = []
        for repeat in range(options.repeats):
            for enabled in (True, False):
                profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
                profile.name = f"bench-watch-{enabled}".lower()
                profile.training.max_steps = options.steps
                profile.training.save_steps = options.steps
                profile.training.logging_steps = 1
                profile.watch.enabled = enabled
                path = save_profile(profile, root / f"{profile.name}.toml")
                subprocess.run([sys.executable, "-m", "backend.cli", "run", str(path)], check=True, capture_output=True,
                               cwd=root)
                run = find_run(profile.name)
                assert refresh(run).status == "finished"
                speeds[enabled].append(train_steps_per_second(run.output_dir))
                if enabled:
                    status = json.loads((run.path / "watch" / "status.json").read_text())
                    cpu.append(status["cpu_percent_of_one_core"])
                run.path.rename(root / f"done-{repeat}-{enabled}")
                print(f"repeat {repeat} watch={enabled}: {speeds[enabled][-1]:.2f} steps/s"
                      + (f", watchdog {cpu[-1]:.3f} % of a core over {status['wall_seconds']:.0f} s" if enabled else ""),
                      flush=True)
    ratio = statistics.median(speeds[True]) / statistics.median(speeds[False])
    print(f"median steps/s: with watchdog {statistics.median(speeds[True]):.2f}, without {statistics.median(speeds[False]):.2f}")
    print(f"ratio with/without: {ratio:.3f} (goal >= 0.99)")
    print(f"watchdog CPU: median {statistics.median(cpu):.3f} % of one core (goal < 1 %)")


if __name__ == "__main__":
    main()
