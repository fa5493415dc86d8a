"""SLURM's own verdict (#40 item 4) against a fake `sacct` on PATH: a script that writes its arguments to a
log and prints what the test put in a file. A run whose job SLURM ended (preempted, timed out, its node
lost, killed for memory, cancelled, failed) is shown by SLURM's word in `workbench status` and `workbench
runs`; one whose supervisor SLURM took with it is concluded and said in its alerts. Expected lines are
written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.contract.alerts import read_alerts
from backend.rundir.layout import RunFolder
from tests.fakes import fake_commands
from tests.faults import helpers as h

FAKE_SACCT = """#!/bin/bash
echo "sacct $*" >> "$FAKE_SLURM_DIR/calls.txt"
cat "$FAKE_SLURM_DIR/sacct.txt" 2>/dev/null
"""
NODE = "node7-of-the-cluster"


@pytest.fixture
def fake_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = fake_commands(tmp_path / "fakeslurm", {"sacct": FAKE_SACCT}, "FAKE_SLURM_DIR", monkeypatch)
    monkeypatch.setattr("backend.cluster.sacct._answers", {})  # no answer of another test's sacct
    return folder


def _calls(folder: Path) -> list[str]:
    path = folder / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def _slurm_run(workspace: Path, job_id: object = "4711", status: str = "running", **state: object) -> RunFolder:
    run = h.fake_run(workspace, status=status, state={"host": NODE, **state})
    (run.path / "slurm_job.json").write_text(json.dumps({"SLURM_JOB_ID": job_id}))
    return run


ENDED = "2026-01-01T03:12:40"
CASES = [
    ("PREEMPTED", "0:15", "stopped", "SLURM preempted the job at 03:12 on 2026-01-01"),
    ("TIMEOUT", "0:1", "stopped", "SLURM ended the job at its time limit (TIMEOUT) at 03:12 on 2026-01-01"),
    ("NODE_FAIL", "0:0", "failed", "SLURM lost a node of the job (NODE_FAIL) at 03:12 on 2026-01-01"),
    ("OUT_OF_MEMORY", "0:125", "failed", "SLURM killed the job: it ran out of the memory it asked for (OUT_OF_MEMORY; "
     "ask for more with --mem, or raise [queue] memory_margin) at 03:12 on 2026-01-01"),
    ("CANCELLED by 1000", "0:0", "stopped", "SLURM cancelled the job (scancel by user 1000) at 03:12 on 2026-01-01"),
    ("FAILED", "1:0", "failed", "SLURM says the job failed (exit code 1:0) at 03:12 on 2026-01-01"),
]


@pytest.mark.parametrize(("slurm_state", "exit_code", "status", "reason"), CASES)
def test_slurm_s_end_is_the_run_s_status_and_reason(workspace: Path, fake_sacct: Path, slurm_state: str,
                                                    exit_code: str, status: str, reason: str) -> None:
    (fake_sacct / "sacct.txt").write_text(f"4711|{slurm_state}|2026-01-01T01:00:00|{ENDED}|{exit_code}\n")
    run = _slurm_run(workspace)
    shown = h.cli("status", run.run_id)
    h.assert_clean_exit(shown, (0,))
    assert f"run {run.run_id}  {status}  (fake)" in shown.output
    assert f"  reason: {reason}\n" in shown.output
    listed = h.cli("runs")
    h.assert_clean_exit(listed, (0,))
    rows = [line.split() for line in listed.output.splitlines() if line.split()[:1] == [run.run_id]]
    assert [row[2] for row in rows] == [status], listed.output
    assert f"  {run.run_id}: {reason}" in listed.output
    # recorded: the supervisor went with the job, so the run is concluded by SLURM's word, once
    state = run.read_state()
    assert (state.status, state.failure_reason) == (status, reason)
    alerts = [a for a in read_alerts(run.path) if a.kind != "info"]
    assert [a.message for a in alerts] == [f"the run's supervisor is gone; {reason}"]
    assert _calls(fake_sacct) == ["sacct --noheader --parsable2 --duplicates --allocations "
                                  "--format=JobID,State,Start,End,ExitCode --jobs=4711"]


def test_a_requeued_job_is_shown_as_preempted_and_requeued_not_recorded(workspace: Path, fake_sacct: Path) -> None:
    (fake_sacct / "sacct.txt").write_text(f"4711|PREEMPTED|2026-01-01T01:00:00|{ENDED}|0:15\n"
                                          "4711|PENDING|Unknown|Unknown|0:0\n")
    run = _slurm_run(workspace, status="stopped", failure_reason="stopped on SIGUSR1 after saving checkpoint-40")
    shown = h.cli("status", run.run_id)
    h.assert_clean_exit(shown, (0,))
    assert ("  reason: SLURM preempted the job at 03:12 on 2026-01-01; requeued (now PENDING); stopped on SIGUSR1 "
            "after saving checkpoint-40\n") in shown.output
    assert run.read_state().failure_reason == "stopped on SIGUSR1 after saving checkpoint-40"  # the next attempt's


def test_a_job_running_again_after_its_requeue_leaves_the_run_as_it_says(workspace: Path, fake_sacct: Path) -> None:
    (fake_sacct / "sacct.txt").write_text(f"4711|PREEMPTED|2026-01-01T01:00:00|{ENDED}|0:15\n"
                                          "4711|RUNNING|2026-01-01T03:20:00|Unknown|0:0\n")
    run = _slurm_run(workspace)
    shown = h.cli("status", run.run_id)
    assert f"run {run.run_id}  running  (fake)" in shown.output
    assert "reason:" not in shown.output


def test_sacct_is_asked_once_within_its_interval(workspace: Path, fake_sacct: Path) -> None:
    (fake_sacct / "sacct.txt").write_text("4711|RUNNING|2026-01-01T01:00:00|Unknown|0:0\n")
    run = _slurm_run(workspace)
    for _ in range(3):
        h.assert_clean_exit(h.cli("status", run.run_id), (0,))
    assert len(_calls(fake_sacct)) == 1


@pytest.mark.parametrize("job_id", ["4711 --user=root", "--jobs=1", "4711\x1b]0;x\x07", [4711]])
def test_a_job_file_without_a_job_id_never_reaches_sacct(workspace: Path, fake_sacct: Path, job_id: object) -> None:
    (fake_sacct / "sacct.txt").write_text(f"4711|NODE_FAIL|2026-01-01T01:00:00|{ENDED}|0:0\n")
    run = _slurm_run(workspace, job_id=job_id)
    shown = h.cli("status", run.run_id)
    h.assert_clean_exit(shown, (0,))
    assert f"run {run.run_id}  running  (fake)" in shown.output
    assert _calls(fake_sacct) == []


def test_lines_that_are_not_the_job_s_records_are_ignored(workspace: Path, fake_sacct: Path) -> None:
    (fake_sacct / "sacct.txt").write_text(
        f"4711|CANCELLED by root;rm -rf|2026-01-01T01:00:00|{ENDED}|0:0\n"  # not `by UID`: the state stands alone
        f"4711|TIMEOUT|2026-01-01T01:00:00|not a time|9:9 $(x)\n"  # the newest of this job's records
        f"4712|NODE_FAIL|2026-01-01T01:00:00|{ENDED}|0:0\n"  # another job
        f"4711|NODE_FAIL\x1b]0;owned\x07|2026-01-01T01:00:00|{ENDED}|0:0\n"  # not a state word
        f"4711 --x|NODE_FAIL|2026-01-01T01:00:00|{ENDED}|0:0\n"
        "4711|a|b\n")
    run = _slurm_run(workspace)
    shown = h.cli("status", run.run_id)
    h.assert_clean_exit(shown, (0,))
    assert "  reason: SLURM ended the job at its time limit (TIMEOUT)\n" in shown.output
    assert "\x1b" not in shown.output and "owned" not in shown.output and "rm -rf" not in shown.output


def test_without_sacct_the_run_folder_s_word_stands(workspace: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    run = _slurm_run(workspace)
    shown = h.cli("status", run.run_id)
    h.assert_clean_exit(shown, (0,))
    assert f"run {run.run_id}  running  (fake)" in shown.output
