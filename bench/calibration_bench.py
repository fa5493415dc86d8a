"""Host forecast against measured RSS on real CPU runs, textbook vs calibrated, each run held out (#37 item 2).

The runs are the records in tests/estimate/fixtures/calibration_runs (real trainings of the built-in model on
the CPU). For each run: its own profile's host forecast on the CPU (as `workbench estimate PROFILE --formula`) with
the calibration off (the textbook 3 GiB per process) and calibrated from the *other* runs only, against the
run's measured peak (the largest tree RSS of its memory_phase events: process and data-loader workers).

    .venv/bin/python bench/calibration_bench.py
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "tests" / "estimate" / "fixtures" / "calibration_runs"
MIB = 2**20


def measured_peak(run: Path) -> int:
    events = (json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip())
    return max(e.get("tree_rss_bytes") or e["rss_bytes"] for e in events if e.get("type") == "memory_phase")


def host_forecast(profile: Path, workspace: Path, *, calibrated: bool) -> int:
    """The profile's host forecast on the CPU, as `workbench estimate PROFILE --formula` makes it."""
    from backend.estimate import estimate
    from backend.estimate.calibration import Calibration
    from backend.estimate.from_profile import request_from_profile, shape_from_profile
    from backend.profile import load_profile

    os.environ["WORKBENCH_WORKSPACE"] = str(workspace)
    os.environ["WORKBENCH_DATA_DIR"] = str(workspace / ".data")
    loaded = load_profile(profile)
    shape = shape_from_profile(loaded, profile.parent)
    request = request_from_profile(
        loaded, shape, on_cpu=True, calibration=None if calibrated else Calibration(off=True)
    )
    return estimate(shape, request).host_total_bytes


def as_this_machine(run: Path, workspace: Path) -> None:
    target = workspace / run.name
    shutil.copytree(run, target)
    state = json.loads((target / "state.json").read_text())
    (target / "state.json").write_text(json.dumps({**state, "host": socket.gethostname()}))


def main() -> None:
    from backend.cli.wiring import install

    install()  # the run registry's refresh, as the CLI registers it
    runs = sorted(p for p in RECORDS.iterdir() if p.is_dir())
    print(f"{'run':34} {'measured':>9} {'textbook':>9} {'error':>7} {'calibrated':>10} {'error':>7}")
    for held in runs:
        with tempfile.TemporaryDirectory() as tmp:
            workspace = Path(tmp) / "runs"
            workspace.mkdir()
            for other in runs:
                if other != held:
                    as_this_machine(other, workspace)
            measured = measured_peak(held)
            textbook = host_forecast(held / "profile.toml", workspace, calibrated=False)
            calibrated = host_forecast(held / "profile.toml", workspace, calibrated=True)
        print(
            f"{held.name:34} {measured / MIB:7.0f}Mi {textbook / MIB:7.0f}Mi {_error(textbook, measured):>7} "
            f"{calibrated / MIB:8.0f}Mi {_error(calibrated, measured):>7}"
        )


def _error(forecast: int, measured: int) -> str:
    return f"{(forecast - measured) / measured * 100:+.0f}%"


if __name__ == "__main__":
    main()
