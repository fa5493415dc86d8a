"""A tampered world.json neither hangs resume nor switches the world check off in silence (#34 item 8):
`workbench resume` (a child process, bounded: the old code hashed /dev/zero for ever) on hand-made runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backend.rundir.layout import RunFolder
from backend.rundir.world import file_sha256
from backend.runs.start import profile_world
from backend.runs.stop import stop_run
from tests.faults import helpers as h
from tests.runs.helpers import workbench


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def _run_with_world(workspace: Path, data: Path, hashes: dict[str, str],
                    world: dict[str, object] | None = None) -> RunFolder:
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--dataset", str(data)]
    run = h.fake_run(workspace, status="stopped", argv=argv, checkpoints=(4,))
    now = profile_world(run.read_profile()).model_dump()
    run.world_path.write_text(json.dumps({"world": {**now, **(world or {})}, "hashes": hashes}))
    return run


def test_a_hash_entry_for_a_device_the_launch_does_not_name_is_not_read(workspace: Path, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": []}\n')
    run = _run_with_world(workspace, data, {str(data): file_sha256(data), "/dev/zero": "0" * 64})
    data.write_text('{"messages": []}\n{"messages": []}\n')
    try:
        result = workbench("resume", run.run_id, "--detach", timeout=60)
        said = " ".join(result.stdout.split())
        assert "warning: world.json names /dev/zero, which the run's command does not read: not checked" in said
        assert f"warning: dataset file {data} changed since launch" in said
    finally:
        stop_run(run)


def test_a_dataset_named_by_the_launch_that_is_now_a_fifo_is_not_read(workspace: Path, tmp_path: Path) -> None:
    import os

    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": []}\n')
    run = _run_with_world(workspace, data, {str(data): file_sha256(data)})
    data.unlink()
    os.mkfifo(data)
    try:
        result = workbench("resume", run.run_id, "--detach", timeout=60)
        assert f"warning: dataset file {data} is not a regular file now: not compared with the launch's" in \
            " ".join(result.stdout.split())
    finally:
        stop_run(run)


def test_a_world_json_that_does_not_parse_is_an_error_with_the_way_on(workspace: Path, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": []}\n')
    run = _run_with_world(workspace, data, {}, world={"nproc_per_node": "two"})

    refused = workbench("resume", run.run_id, "--detach", timeout=60, check=False)

    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused
    assert (f"cannot resume {run.run_id}: world.json is damaged: world.nproc_per_node: Input should be a valid "
            "integer, unable to parse string as an integer, so the world the checkpoint was made in is unknown. "
            "Put world.json back, or resume with --allow-world-change to go on without the world check") in said
    assert run.read_state().status == "stopped"
    try:
        allowed = workbench("resume", run.run_id, "--detach", "--allow-world-change", timeout=60)
        assert "warning: world.json is damaged: world.nproc_per_node: Input should be a valid integer, unable to " \
               "parse string as an integer; the world check is skipped (--allow-world-change)" in \
               " ".join(allowed.stdout.split())
    finally:
        stop_run(run)
