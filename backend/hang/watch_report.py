"""The watchdog's hang report (#39), from what the run folder holds at a hang alert: each rank's progress
record, the stacks just taken, the NCCL watchdog's lines in the log. Returns the alert's evidence."""

from __future__ import annotations

import time
from typing import Any

from backend.contract.heartbeat import read_rank_progress
from backend.hang.flight_recorder import FlightReport, analyse, ask_dumps, read_asked_dumps, torch_analysis
from backend.hang.nccl_log import watchdog_tables
from backend.hang.report import build_report, write_report
from backend.rundir.layout import RunFolder

LOG_BYTES = 1 << 20  # the NCCL watchdog's lines come at the end of the log, from every rank


def hang_report(run: RunFolder, stacks: dict[str, str], world_size: int | None, step: int | None) -> dict[str, Any]:
    """Builds the report, writes `<run>/watch/hang-report.txt`, returns its evidence (summary, ranks, lagging,
    the report's path) for the alert; the stacks themselves stay in the report and alerts.jsonl."""
    progress = read_rank_progress(run.path)
    flight = None
    if len(progress) > 1:  # the flight recorder (#39): each rank's dump, asked now, read as "who is missing"
        asked = ask_dumps(run.path, sorted(progress))
        dumps = read_asked_dumps(run.path)
        flight = analyse(dumps) if dumps else None
        if flight is not None:
            flight.lines += [f"rank {r}: {why}" for r, why in asked.items() if why != "dumped"]
        flight = _with_torch(flight, torch_analysis(run.path))
    report = build_report(progress, stacks, watchdog_tables(run.log_tail(LOG_BYTES), world_size), flight=flight)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    where = f" after step {step}" if step is not None else ""
    path = write_report(run.path, report, f"Hang report of run {run.run_id}{where}, {when}")
    return {**report.evidence(), "report": str(path)}


def _with_torch(flight: FlightReport | None, torch_text: str | None) -> FlightReport | None:
    """torch's own analysis of its NCCL-timeout dumps (GPU runs), added to the report's flight recorder part."""
    if torch_text is None:
        return flight
    flight = flight or FlightReport()
    flight.lines += ["torch's analyser on its dumps at the NCCL timeout:", *torch_text.splitlines()]
    return flight
