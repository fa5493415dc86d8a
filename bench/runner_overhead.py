"""Does launching through the workbench slow training down?

Runs the same tiny LoRA training twice each way, alternating:
  bare:      python -m swift.cli.sft <the same swift arguments, no plugin>
  workbench: workbench run (accelerate launch + supervisor + events callback)
and prints the trainer's own steps per second (`train_steps_per_second` from swift's logging.jsonl)
and the ratio workbench / bare (goal: >= 0.99).

    .venv/bin/python bench/runner_overhead.py [--steps 600] [--repeats 2]
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
from backend.hardware.machine import detect_hardware  # noqa: E402
from backend.launch.command import PLUGIN_CALLBACK_NAME, build_launch  # noqa: E402
from backend.models.refs import resolve_model  # noqa: E402
from backend.profile import load_profile, save_profile  # noqa: E402
from backend.runs.lookup import find_run  # noqa: E402
from backend.runs.status import refresh  # noqa: E402


def train_steps_per_second(output_dir: Path) -> float:
    lines = (output_dir / "logging.jsonl").read_text().splitlines()
    records = (json.loads(line) for line in reversed(lines))
    return float(next(r["train_steps_per_second"] for r in records if "train_steps_per_second" in r))


def bare_argv(profile, run_dir: Path) -> list[str]:
    """The workbench's own swift arguments, without accelerate and without the plugin."""
    plan = build_launch(profile, run_dir, detect_hardware())
    args = plan.argv[plan.argv.index("swift.cli.sft") + 1:]
    cut = args.index("--external_plugins")
    assert args[cut + 2:cut + 4] == ["--callbacks", PLUGIN_CALLBACK_NAME]
    return [sys.executable, "-m", "swift.cli.sft", *args[:cut], *args[cut + 4:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.setdefault("WORKBENCH_DATA_DIR", str(root / "data"))
        os.environ.setdefault("WORKBENCH_WORKSPACE", str(root / "runs"))
        profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
        profile.name = "bench-overhead"
        profile.training.max_steps = options.steps
        profile.training.save_steps = options.steps
        resolve_model(profile.model.source, build=True)
        profile_path = save_profile(profile, root / "bench.toml")
        bare, workbench = [], []
        for repeat in range(options.repeats):
            run_dir = root / f"bare-{repeat}"
            argv = bare_argv(profile, run_dir)
            subprocess.run(argv, check=True, capture_output=True, cwd=root, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            bare.append(train_steps_per_second(run_dir / "output"))
            subprocess.run([sys.executable, "-m", "backend.cli", "run", str(profile_path)], check=True,
                           capture_output=True, cwd=root)
            run = find_run("bench-overhead")
            assert refresh(run).status == "finished"
            workbench.append(train_steps_per_second(run.output_dir))
            run.path.rename(root / f"done-{repeat}")  # next find_run sees one run only
            print(f"repeat {repeat}: bare {bare[-1]:.1f} steps/s, workbench {workbench[-1]:.1f} steps/s", flush=True)
    ratio = statistics.median(workbench) / statistics.median(bare)
    print(f"median steps/s: bare {statistics.median(bare):.1f}, workbench {statistics.median(workbench):.1f}")
    print(f"ratio workbench/bare: {ratio:.3f} (goal >= 0.99)")


if __name__ == "__main__":
    main()
