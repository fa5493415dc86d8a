"""High 6: one corrupt file is shown as "damaged: <why>" and skipped; it never hides other runs, and
a damaged run can still be deleted (with confirmation)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from backend.runs.lookup import list_runs
from backend.runs.status import refresh
from backend.runs.summaries import summarize
from tests.faults import helpers as h


@pytest.mark.parametrize("content, why", [
    (b"", "damaged: state.json is empty"),
    (b"\x80\x81\xfe", "damaged: state.json: not UTF-8 text (byte 0)"),
    (b'{"run_id": "x", "status": ', "damaged: state.json: not JSON"),
    (b'{"run_id": "x", "profile_name": "p", "status": 5}', "damaged: state.json: field status"),
])
def test_a_damaged_state_json_is_listed_as_damaged_beside_the_good_run(workspace: Path, content: bytes,
                                                                        why: str) -> None:
    good = h.fake_run(workspace, "20260101-120000-good-0001")
    bad = h.fake_run(workspace, "20260101-130000-bad-0002")
    bad.state_path.write_bytes(content)
    assert {r.run_id for r in list_runs()} == {good.run_id, bad.run_id}
    assert refresh(bad).status == "damaged" and refresh(bad).failure_reason.startswith(why)
    listing = h.cli("runs")
    h.assert_clean_exit(listing, (0,))
    assert good.run_id in listing.output and f"{bad.run_id}: {why}" in listing.output


def test_a_damaged_run_is_deleted_after_confirmation(workspace: Path) -> None:
    bad = h.fake_run(workspace)
    bad.state_path.write_bytes(b"\0\0\0")
    refused = h.cli("delete", bad.run_id, input="n\n")
    assert refused.exit_code == 1 and bad.path.is_dir()
    assert f"delete damaged run {bad.path} (damaged: state.json: not JSON" in refused.output
    confirmed = h.cli("delete", bad.run_id, input="y\n")
    h.assert_clean_exit(confirmed, (0,))
    assert not bad.path.exists()


def test_damaged_event_lines_are_skipped(workspace: Path) -> None:
    run = h.fake_run(workspace)
    h.write_events(run, {"type": "log", "step": 7, "max_steps": 10, "loss": 0.25})
    with open(run.events_path, "ab") as handle:
        handle.write(b'\x80\x00{"type": "log", "step": 8}\n{"type": "log", "step": "nine", "loss": "low"}\n[1]\n')
    summary = summarize(run)
    assert (summary.step, summary.max_steps, summary.loss) == (7, 10, 0.25)
    h.assert_clean_exit(h.cli("status", run.run_id), (0,))


def test_a_bad_index_line_is_reported_and_skipped(workspace: Path) -> None:
    run = h.fake_run(workspace)
    index = Path(os.environ["WORKBENCH_DATA_DIR"]) / "runs.jsonl"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_bytes(b'\xff\xfe\n{"path": 5}\n' + json.dumps({"path": str(run.path)}).encode() + b"\n")
    listing = h.cli("runs")
    h.assert_clean_exit(listing, (0,))
    assert run.run_id in listing.output
    assert f"damaged: {index} line 1: not UTF-8; skipped" in listing.output
    assert f"damaged: {index} line 2: its path is not a folder path; skipped" in listing.output


def test_a_run_whose_state_json_was_deleted_mid_run_is_still_listed_and_stoppable(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    trainer = h.sleeper(marker=run.path)
    run.state_path.unlink()
    listing = h.cli("runs")
    assert run.run_id in listing.output and "running" in listing.output
    assert "damaged: state.json is missing; its processes are still running" in listing.output
    stopped = h.cli("stop", run.run_id)
    h.assert_clean_exit(stopped, (0,))
    assert "sent SIGINT to 1 process(es)" in stopped.output
    h.wait_until(lambda: trainer.poll() is not None, what="the trainer to end")
