"""This machine's finished runs read for the forecast's calibration (backend/estimate/calibration.py).

`refresh` brings the cache up to date with the runs the user has (the runs index and the workspace): a run
whose files have not changed since it was read (core.tail marks of state.json, forecast.json, events.jsonl,
profile.toml) is not read again, so a look costs a few stats per run. Only runs of this host that finished
count. A run with a damaged file is kept in the cache with its problem, which the forecast names; it never
hides the others. Registered with the estimate room by backend.cli.wiring.
"""

from __future__ import annotations

import json
from typing import Any

from backend.contract.events import EventReader, MemoryPhase, RunBegin, StepTime
from backend.core.process_identity import this_host
from backend.core.tail import mark
from backend.estimate.calibration import (
    CPU,
    CacheFile,
    RunRecord,
    host_process_of_run,
    loader_worker_of_run,
    read_cache,
    swift_workers,
    write_cache,
)
from backend.profile import ProfileError
from backend.rundir.index import known_runs
from backend.rundir.layout import RunFolder


def refresh() -> CacheFile:
    """The cache, with every finished run of this host read (again only when one of its files changed)."""
    host = this_host()
    old = read_cache(host) or CacheFile(host=host)
    records: dict[str, RunRecord] = {}
    for run in known_runs():
        key, marks = str(run.path), run_marks(run)
        prior = old.runs.get(key)
        records[key] = prior if prior is not None and prior.marks == marks else read_run(run, marks, host)
    cache = CacheFile(host=host, runs=records)
    if records != old.runs:
        write_cache(cache)
    return cache


def run_marks(run: RunFolder) -> list[Any]:
    """The marks as the cache stores them (lists, as JSON gives them back)."""
    marks = (mark(path) for path in (run.state_path, run.forecast_path, run.events_path, run.profile_path))
    return [list(m) if m is not None else None for m in marks]


def read_run(run: RunFolder, marks: list[Any], host: str) -> RunRecord:
    """What a finished run of `host` measured; a record without values when it is no evidence (running,
    failed, another host's, no forecast stored)."""
    state = run.state_or_damaged()
    if state.status == "damaged":
        return RunRecord(run.run_id, marks, problem=f"state.json damaged ({state.failure_reason})")
    if state.status != "finished" or state.host != host:
        return RunRecord(run.run_id, marks)
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
        workers = swift_workers(run.read_profile().training.dataloader_num_workers)
    except FileNotFoundError:
        return RunRecord(run.run_id, marks)  # a run from before forecasts were stored: nothing to compare with
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ProfileError) as err:
        return RunRecord(run.run_id, marks, problem=f"{_file_of(err)} damaged ({type(err).__name__})")
    if not isinstance(forecast, dict):
        return RunRecord(run.run_id, marks, problem="forecast.json damaged (not an object)")
    return _measured(run, marks, forecast, workers)


def _file_of(err: Exception) -> str:
    return "profile.toml" if isinstance(err, ProfileError) else "forecast.json"


def _measured(run: RunFolder, marks: list[Any], forecast: dict[str, Any], workers: int | None) -> RunRecord:
    """Rank by rank, the largest own RSS and (tree - own) RSS of each phase; the device kind from run_begin
    ("cpu") or rank 0's step timing (the GPU's name)."""
    own: dict[str, int] = {}
    children: dict[str, int] = {}
    kind: str | None = None
    reader = EventReader(run.events_path)
    for event in reader.each():
        if isinstance(event, RunBegin) and event.devices:
            kind = CPU if all(d.startswith("cpu") for d in event.devices) else kind
        elif isinstance(event, StepTime) and event.device_name and event.rank == 0 and kind is None:
            kind = event.device_name
        elif isinstance(event, MemoryPhase) and event.rss_bytes:
            own[event.phase] = max(own.get(event.phase, 0), event.rss_bytes)
            extra = (event.tree_rss_bytes or event.rss_bytes) - event.rss_bytes
            children[event.phase] = max(children.get(event.phase, 0), extra)
    problems = reader.problems()
    if problems:
        return RunRecord(run.run_id, marks, problem=f"events.jsonl damaged ({'; '.join(problems)})")
    try:
        process = host_process_of_run(forecast, own, on_cpu=kind == CPU)
    except (TypeError, ValueError, AttributeError):
        return RunRecord(run.run_id, marks, problem="forecast.json damaged (not a forecast)")
    return RunRecord(
        run.run_id,
        marks,
        device_kind=kind,
        host_process_bytes=process,
        loader_worker_bytes=loader_worker_of_run(children, workers),
    )
