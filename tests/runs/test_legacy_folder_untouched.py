"""A folder with a state.json but no run.json (made before run folders carried their identity, or not
by the workbench) is listed, but `runs` and `status --line` write nothing into it (#29 Low)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], capture_output=True, text=True, timeout=scaled(120), check=False,
                          cwd=REPO, env=os.environ.copy())


def test_runs_and_the_status_line_leave_a_folder_without_run_json_as_it_was(isolated_runs: Path) -> None:
    folder = isolated_runs / "legacy-x"
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({
        "run_id": "legacy-x", "profile_name": "legacy", "status": "running", "host": socket.gethostname(),
        "supervisor_pid": 4_000_000, "supervisor_started": 1.0, "created_at": 5.0}))
    (folder / "events.jsonl").write_text(json.dumps({"v": 1, "type": "log", "rank": 0, "time": 1.0, "step": 3,
                                                     "loss": 1.0}) + "\n")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert _cli("status", "--line").stdout == "legacy ?\n"
    listing = _cli("runs")
    assert listing.returncode == 0, listing.stderr
    assert ("legacy-x: lost: the supervisor and every process of the run are gone without recording how it ended; "
            "last step 3; no complete checkpoint") in listing.stdout
    assert sorted(path.name for path in folder.iterdir()) == ["events.jsonl", "state.json"]  # no lock, watch/, alerts
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
