"""`workbench run PROFILE --on sky` and `queue add --sky` (#40 item 2) against a fake `sky` on PATH: a script that
writes its arguments to a log, answers "Job submitted, ID: 7" to `sky jobs launch` and prints the test's file
to `sky jobs queue --output json` (records made by SkyPilot's own ManagedJobRecord model). The task itself is checked by SkyPilot's real parser before it is
submitted. Expected commands and lines are written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.rundir.layout import RunFolder
from tests.fakes import fake_commands

FAKE_SKY = r"""#!/bin/bash
echo "sky $*" >> "$FAKE_SKY_DIR/calls.txt"
case "$1 $2" in
  "jobs launch")
    if [ -e "$FAKE_SKY_DIR/launch-refuses" ]; then
      echo "sky.exceptions.ResourcesUnavailableError: Failed to acquire resources in all zones" >&2; exit 1
    fi
    cp "$3" "$FAKE_SKY_DIR/launched.yaml"
    printf '\033[1mJob submitted, ID: 7\033[0m\n' ;;
  "jobs queue") cat "$FAKE_SKY_DIR/queue.json" ;;
  "jobs cancel") echo "Cancelling managed job 7" ;;
esac
"""


@pytest.fixture
def fake_sky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_runs: Path) -> Path:
    folder = fake_commands(tmp_path / "fakesky", {"sky": FAKE_SKY}, "FAKE_SKY_DIR", monkeypatch)
    monkeypatch.setattr("backend.cluster.sky_jobs._last_answer", None)
    monkeypatch.setattr("backend.cluster.sky_jobs.SKY_EVERY_S", 0.0)  # each look asks: the test changes the state
    return folder


def _cli(*args: str) -> Any:
    return CliRunner().invoke(full_app(), list(args))


def _calls(folder: Path) -> list[str]:
    path = folder / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def _sky_says(folder: Path, status: str, recoveries: int = 0) -> None:
    """What `sky jobs queue --output json` prints for job 7: SkyPilot's own record model, dumped as its CLI
    dumps it (`[r.model_dump(mode='json') for r in managed_jobs]`), so the fields are SkyPilot 0.14's."""
    from sky.jobs.state import ManagedJobStatus
    from sky.schemas.api.responses import ManagedJobRecord

    record = ManagedJobRecord(job_id=7, job_name="quickstart", status=ManagedJobStatus(status),
                              recovery_count=recoveries)
    (folder / "queue.json").write_text(json.dumps([record.model_dump(mode="json")]))


def _status(run_id: str) -> tuple[str, str]:
    result = _cli("status", run_id)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    status = lines[0].split()[2]
    reason = next((line.split("reason: ", 1)[1] for line in lines if line.startswith("  reason: ")), "")
    return status, reason


def test_a_run_on_sky_is_submitted_followed_through_a_recovery_and_cancelled(
        fake_sky: Path, tiny_model: Path, isolated_runs: Path) -> None:
    result = _cli("run", "quickstart", "--on", "sky", "--bucket", "team-runs", "--accelerator", "L4")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("submitted SkyPilot job 7, run ")
    run = RunFolder(isolated_runs / first.split()[-1])
    launch = _calls(fake_sky)
    assert len(launch) == 1
    assert launch[0].startswith("sky jobs launch ") and launch[0].endswith(" --name quickstart --yes --detach-run")
    assert (fake_sky / "launched.yaml").read_text() == (run.path / "sky_task.yaml").read_text()
    assert json.loads((run.path / "sky_job.json").read_text())["job_id"] == "7"

    _sky_says(fake_sky, "STARTING")
    assert _status(run.run_id) == ("starting", "SkyPilot job 7: STARTING")
    _sky_says(fake_sky, "RUNNING")
    assert _status(run.run_id) == ("running", "SkyPilot job 7: RUNNING")
    _sky_says(fake_sky, "RECOVERING")
    assert _status(run.run_id) == ("running", "SkyPilot job 7: RECOVERING (its instance was preempted or lost: "
                                              "SkyPilot is starting it on another)")
    run.update_state(resumed_from="checkpoint-40")  # what the recovered job's supervisor wrote (synced here)
    _sky_says(fake_sky, "RUNNING", recoveries=1)
    assert _status(run.run_id) == ("running", "SkyPilot job 7: RUNNING, recovered 1 time on another instance; "
                                              "resumed from checkpoint-40")
    listed = _cli("runs")
    row = next(line.split() for line in listed.output.splitlines() if line.split()[:1] == [run.run_id])
    assert row[2] == "running"
    assert (f"  {run.run_id}: SkyPilot job 7: RUNNING, recovered 1 time on another instance; resumed from "
            f"checkpoint-40") in listed.output

    stopped = _cli("stop", run.run_id)
    assert "SkyPilot job 7 cancelled (sky jobs cancel 7)" in stopped.output
    assert [c for c in _calls(fake_sky) if "cancel" in c] == ["sky jobs cancel --yes 7"]
    _sky_says(fake_sky, "CANCELLED", recoveries=1)
    assert _status(run.run_id)[0] == "stopped"
    assert run.read_state().status == "stopped"  # recorded: SkyPilot is not asked again for an ended job
    asked = len(_calls(fake_sky))
    _status(run.run_id)
    assert len(_calls(fake_sky)) == asked


def test_hostile_values_from_sky_are_refused_or_escaped(fake_sky: Path, tiny_model: Path,
                                                        isolated_runs: Path) -> None:
    result = _cli("queue", "add", "quickstart", "--sky", "--bucket", "team-runs")
    assert result.exit_code == 0, result.output
    run = RunFolder(isolated_runs / result.output.splitlines()[0].split()[-1])
    (fake_sky / "queue.json").write_text(json.dumps([
        {"job_id": "7 --all", "status": "CANCELLED"},  # not a job id: never this run's
        {"job_id": 7, "job_name": "x\x1b]0;owned\x07", "status": "RUNNING\x1b[2J", "recovery_count": "many"},
    ]))
    status, reason = _status(run.run_id)
    assert (status, reason) == ("starting", "SkyPilot job 7: unknown (RUNNING\\x1b[2J)")
    assert run.read_state().status == "starting"


def test_a_refused_launch_leaves_nothing_behind(fake_sky: Path, tiny_model: Path, isolated_runs: Path) -> None:
    (fake_sky / "launch-refuses").touch()
    result = _cli("run", "quickstart", "--on", "sky", "--bucket", "team-runs", "--accelerator", "L4")
    assert result.exit_code == 2
    assert ("sky jobs launch did not submit the job: sky.exceptions.ResourcesUnavailableError: Failed to acquire "
            "resources in all zones") in result.output
    assert [p.name for p in isolated_runs.iterdir()] == []


def test_a_sweep_is_one_managed_job_per_combination(fake_sky: Path, tiny_model: Path, isolated_runs: Path,
                                                    tmp_path: Path) -> None:
    from tests.runs.helpers import quick_profile

    profile = quick_profile(tmp_path, sweep={"training.learning_rate": [1e-4, 2e-4]})
    result = _cli("queue", "add", str(profile), "--sky", "--bucket", "team-runs")
    assert result.exit_code == 0, result.output
    launches = [call.split(" --name ")[1] for call in _calls(fake_sky) if call.startswith("sky jobs launch ")]
    assert launches == ["quickstart-test-lr1e-04 --yes --detach-run", "quickstart-test-lr2e-04 --yes --detach-run"]
    assert [line.split(",")[0] for line in result.output.splitlines() if line.startswith("submitted")] == \
        ["submitted SkyPilot job 7", "submitted SkyPilot job 7"]
