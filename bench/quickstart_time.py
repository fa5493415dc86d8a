"""The quickstart's wall-clock times on this machine: launch to the first logged step, to the run's end.

Runs `workbench run quickstart --detach` in a fresh data folder (the embedded model is built first if the
cache lacks it, and not timed), waits for the run to end, and reads the times from the run folder itself:
state.json's `created_at` (the launch), events.jsonl's first `run_begin` (swift imported, the model loaded,
the data prepared), its first `log` (the first logged step) and its `run_end`. The machine's load average
at the start and at the end is printed beside them: the figures of a loaded machine are not an idle one's.

    .venv/bin/python bench/quickstart_time.py [--data-dir DIR] [--json] [--read RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKBENCH = [sys.executable, "-m", "backend.cli"]  # this checkout's workbench (the console script's entry point)


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def measure(data_dir: Path) -> dict[str, object]:
    from backend.rundir.layout import RunFolder

    env = {**os.environ, "WORKBENCH_DATA_DIR": str(data_dir)}
    subprocess.run([*WORKBENCH, "demo-model"], env=env, check=True, capture_output=True, cwd=REPO)
    load_before = _load()
    subprocess.run([*WORKBENCH, "run", "quickstart", "--detach"], env=env, check=True, capture_output=True,
                   cwd=REPO)
    run_dir = next(p for p in (data_dir / "runs").iterdir() if p.is_dir() and p.name != "previews")
    run = RunFolder(run_dir)
    while run.read_state().is_active:
        time.sleep(2)
    return {"cpus": os.cpu_count(), "load_before": load_before, "load_after": _load(), **times(run_dir)}


def times(run_dir: Path) -> dict[str, object]:
    """Seconds from the launch (state.json's created_at) to each phase of the start and to the end."""
    from backend.contract.events import Log, Phase, RunBegin, RunEnd, read_events
    from backend.core.tail import first_lines
    from backend.rundir.layout import RunFolder
    from backend.rundir.startup import MAIN_STARTED, local_time

    run = RunFolder(run_dir)
    state = run.read_state()
    events = [e for e in read_events(run.events_path) if e.rank == 0]
    main = MAIN_STARTED.findall(first_lines(run.log_path, 1 << 20).text)
    marks = {
        "model_load_begins": next((e.time for e in events if isinstance(e, Phase) and e.phase == "model"), None),
        "dataset_begins": local_time(main[0]) if main else None,
        "first_step_begins": next((e.time for e in events if isinstance(e, RunBegin)), None),
        "first_logged_step": next((e.time for e in events if isinstance(e, Log) and e.step is not None), None),
        "end": next((e.time for e in events if isinstance(e, RunEnd)), None),
    }
    return {"run": run.run_id, "status": state.status,
            "steps": next((e.step for e in events if isinstance(e, RunEnd)), None),
            **{f"to_{name}_s": round(at - state.created_at, 1) if at else None for name, at in marks.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--read", type=Path, default=None, help="Only read the times of this finished run folder.")
    options = parser.parse_args()
    data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="workbench-quickstart-bench-"))
    result = times(options.read) if options.read else measure(data_dir)
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
