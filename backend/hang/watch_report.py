"""The watchdog's hang report (#39), from what the run folder holds at a hang alert: each rank's progress
record, the stacks just taken, the NCCL watchdog's lines in the log. Returns the alert's evidence."""

from __future__ import annotations

import time
from typing import Any

from backend.contract.heartbeat import read_rank_progress
from backend.hang.nccl_log import watchdog_tables
from backend.hang.report import build_report, write_report
from backend.rundir.layout import RunFolder

LOG_BYTES = 1 << 20  # the NCCL watchdog's lines come at the end of the log, from every rank


def hang_report(run: RunFolder, stacks: dict[str, str], world_size: int | None, step: int | None) -> dict[str, Any]:
    """Builds the report, writes `<run>/watch/hang-report.txt`, returns its evidence (summary, ranks, lagging,
    the report's path) for the alert; the stacks themselves stay in the report and alerts.jsonl."""
    report = build_report(read_rank_progress(run.path), stacks, watchdog_tables(run.log_tail(LOG_BYTES), world_size))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    where = f" after step {step}" if step is not None else ""
    path = write_report(run.path, report, f"Hang report of run {run.run_id}{where}, {when}")
    return {**report.evidence(), "report": str(path)}
