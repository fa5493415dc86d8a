"""`workbench status` and `workbench doctor` on a run folder whose trainer waited for data half of each step (#38):
status carries the doctor's verdict in one line, the doctor its evidence and change; --apply with no such verdict
is refused with the numbers there are."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from backend.cli.app import full_app
from tests.faults.helpers import fake_run, write_events


def _waiting_run(workspace: Path) -> str:
    run = fake_run(workspace)
    (run.path / "output").mkdir(exist_ok=True)
    (run.path / "output" / "args.json").write_text(json.dumps({"dataloader_num_workers": 1, "tuner_type": "lora"}))
    write_events(run, {"type": "step_time", "first_step": 1, "last_step": 4, "step_seconds": [0.2] * 4,
                       "data_wait": 0.4, "forward_backward": 0.4, "real_tokens": 400, "real_tokens_sq": 40_000})
    return run.run_id


def test_status_and_doctor_say_the_data_wait_and_its_change(isolated_runs: Path) -> None:
    run_id = _waiting_run(isolated_runs)
    better = max(2, min(8, os.cpu_count() or 1))
    status = CliRunner().invoke(full_app(), ["status", run_id])
    assert status.exit_code == 0, status.output
    assert f"doctor: waiting for data 50% of step time with dataloader_num_workers = 1 -> {better}" in status.output
    doctor = CliRunner().invoke(full_app(), ["doctor", run_id])
    assert doctor.exit_code == 0, doctor.output
    assert "    waiting for data                 0.400 s   50.0%" in doctor.output
    assert f"change: training.dataloader_num_workers = {better}  (`workbench doctor {run_id} --apply 1` queues it)" \
        in doctor.output
    refused = CliRunner().invoke(full_app(), ["doctor", run_id, "--apply", "3"])
    assert refused.exit_code == 2
    assert f"--apply 3: the doctor's verdicts on run {run_id} that change the profile are numbered 1 to 1" \
        in refused.output
