"""This machine's calibration of the forecast, learned from its own finished runs (#37 item 2).

Every run measures its memory per phase (`memory_phase` events: the process's own RSS and its tree's, with
its data-loader workers). For each finished run of this machine the calibration keeps, per device kind
("cpu", or the GPU's name) and per term family:

* `host_process`: what one training process holds beyond the forecast's other host terms (Python, torch,
  swift, the tokenizer, the data), the largest over the measured phases of (own RSS - the forecast's other
  terms of that phase), so the host forecast covers every phase that was measured;
* `loader_worker`: one data-loader worker's RSS ((tree RSS - own RSS) / workers), for runs whose number of
  workers is known.

A family's value is the largest over the runs of its kind (the safe side), with those runs' ids as its
evidence. No evidence: the textbook term (`terms.HOST_PROCESS_BYTES`), said as such. `machine_calibration`
is the one function every forecast asks (estimate, validate, the launch dialog, queue admission): it reads
the cache file under the workspace, refreshed first by the run registry's `refresh` when the lifecycle floor
has lent it (backend/estimate/calibration_hook.py, filled by backend.cli.wiring). `WORKBENCH_CALIBRATION=off`
(or `estimate --no-calibration`) turns it off. The per-run reading lives with the runs
(backend/runs/calibration_runs.py): this room does not know run folders.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from backend.core.fs import write_bytes_atomic
from backend.core.paths import cache_dir, workspace_dir
from backend.core.process_identity import this_host
from backend.core.units import gib
from backend.estimate import terms as t
from backend.estimate.calibration_hook import registered_refresh
from backend.estimate.cpu_host import HOST_TERM, device_bytes
from backend.estimate.request import EstimateRequest

OFF_ENV = "WORKBENCH_CALIBRATION"  # "off": every forecast uses the textbook terms
CPU = "cpu"
SHOWN_RUN_IDS = 4


class RunRecord(msgspec.Struct, frozen=True):
    """What one run taught (or why it could not): the cache's unit. A run that is no evidence (not finished,
    another machine's, no forecast stored) is kept without values, so it is not read again until it changes."""

    run_id: str
    marks: list[Any]  # core.tail.mark of the run's files when read: a changed file is read again
    device_kind: str | None = None
    host_process_bytes: int | None = None
    loader_worker_bytes: int | None = None
    problem: str | None = None  # a damaged file: the run is skipped, and said


class CacheFile(msgspec.Struct):
    host: str
    runs: dict[str, RunRecord] = {}  # run folder path -> record
    v: int = 1


@dataclass(frozen=True)
class Evidence:
    """One calibrated term: its value and the runs it was measured over."""

    family: str
    device_kind: str
    value_bytes: int
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class Calibration:
    evidence: tuple[Evidence, ...] = ()
    skipped: tuple[str, ...] = ()  # "run ID: why" for each damaged run
    off: bool = False

    def of(self, device_kind: str) -> dict[str, Evidence]:
        return {e.family: e for e in self.evidence if e.device_kind == device_kind}


# ---------------------------------------------------------------- one run's evidence


def host_process_of_run(forecast: Mapping[str, Any], own_rss: Mapping[str, int], on_cpu: bool) -> int | None:
    """The largest over the measured phases of (the process's own RSS - the forecast's other host terms per
    process in that phase). On the CPU the device's terms are host memory too (without CUDA's context and
    allocator slack); a forecast made before they were put on the host did not count them there."""
    local = max(1, int(forecast.get("request", {}).get("num_gpus", 1)))
    found = None
    for phase in forecast.get("timeline", []):
        rss = own_rss.get(phase.get("phase"))
        if not rss:
            continue
        host = dict(phase.get("host_terms", {}))
        others = sum(v for k, v in host.items() if k != "process_baseline") / local
        if on_cpu and HOST_TERM not in host:
            others += device_bytes(phase.get("gpu_terms", {}))
        value = int(rss - others)
        found = value if found is None else max(found, value)
    return found if found and found > 0 else None


def loader_worker_of_run(tree_extra: Mapping[str, int], workers: int | None) -> int | None:
    """One worker's RSS: the largest (tree RSS - own RSS) of a phase over the number of workers."""
    if not workers or not tree_extra:
        return None
    largest = max(tree_extra.values())
    return largest // workers if largest > 0 else None


# ---------------------------------------------------------------- the cache and the one question


def calibration_path(host: str | None = None) -> Path:
    """Per workspace and machine (a workspace may be shared by several), in the user's cache: the runs folder
    holds run folders only. `<cache>/calibration/<workspace digest>-<host>.json`."""
    workspace = hashlib.sha256(str(workspace_dir()).encode()).hexdigest()[:16]
    return cache_dir() / "calibration" / f"{workspace}-{host or this_host()}.json"


def read_cache(host: str | None = None) -> CacheFile | None:
    """The cache as written, or None when there is none or it is damaged (it is rebuilt from the runs)."""
    try:
        cache = msgspec.json.decode(calibration_path(host).read_bytes(), type=CacheFile)
    except (OSError, msgspec.DecodeError):
        return None
    return cache if cache.host == (host or this_host()) else None


def write_cache(cache: CacheFile) -> None:
    path = calibration_path(cache.host)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, msgspec.json.encode(cache))


def switched_off() -> bool:
    return os.environ.get(OFF_ENV, "").strip().lower() in ("off", "0", "false", "no")


def machine_calibration() -> Calibration:
    """This machine's calibration: the one function every forecast asks."""
    if switched_off():
        return Calibration(off=True)
    refresh = registered_refresh()
    cache = refresh() if refresh is not None else read_cache()
    return summarize(cache) if cache is not None else Calibration()


def summarize(cache: CacheFile) -> Calibration:
    """Per device kind and family: the largest value over the runs, with their ids (sorted)."""
    found: dict[tuple[str, str], list[tuple[int, str]]] = {}
    skipped = []
    for record in cache.runs.values():
        if record.problem:
            skipped.append(f"run {record.run_id}: {record.problem}")
            continue
        if record.device_kind is None:
            continue
        for family, value in (
            ("host_process", record.host_process_bytes),
            ("loader_worker", record.loader_worker_bytes),
        ):
            if value:
                found.setdefault((record.device_kind, family), []).append((value, record.run_id))
    evidence = tuple(
        Evidence(family, kind, max(v for v, _ in pairs), tuple(sorted(r for _, r in pairs)))
        for (kind, family), pairs in sorted(found.items())
    )
    return Calibration(evidence, tuple(sorted(skipped)))


# ---------------------------------------------------------------- applied to a forecast


def calibrate(
    request: EstimateRequest, device_kind: str, workers: int | None, calibration: Calibration | None = None
) -> EstimateRequest:
    """`request` with this machine's terms for `device_kind` (this machine's calibration unless one is
    given), and the lines that say where each term came from. Runs that do not cover the request (its
    data-loader workers never measured) leave it the textbook terms: a calibrated baseline without its
    workers would be the dangerous direction."""
    calibration = machine_calibration() if calibration is None else calibration
    textbook = f"{gib(t.HOST_PROCESS_BYTES)} GiB"
    skipped = tuple(f"calibration skipped {line}" for line in calibration.skipped)
    gap = uncovered(calibration, device_kind, workers)
    if gap is not None:
        return replace(request, calibration=(f"textbook terms: {gap}; host baseline {textbook} assumed", *skipped))
    known = calibration.of(device_kind)
    process, worker = known["host_process"], known.get("loader_worker")
    lines = [
        f"host baseline: {gib(process.value_bytes, 2)} GiB measured over {_count(process)} on this machine "
        f"(was {textbook} assumed)",
        f"  its runs: {_ids(process)}",
    ]
    if worker is not None and workers:
        lines += [
            f"data-loader worker: {gib(worker.value_bytes, 2)} GiB each measured over {_count(worker)}, "
            f"{workers} counted (not in the textbook terms)",
            f"  its runs: {_ids(worker)}",
        ]
    return replace(
        request,
        host_process_bytes=process.value_bytes,
        host_worker_bytes=(workers or 0) * (worker.value_bytes if worker else 0),
        calibration=(*lines, *skipped),
    )


def uncovered(calibration: Calibration, device_kind: str, workers: int | None) -> str | None:
    """Why this machine's runs do not cover the request (the textbook terms are used then), or None."""
    known = calibration.of(device_kind)
    if calibration.off:
        return "calibration switched off"
    if "host_process" not in known:
        return f"no finished run on this machine ({_kind_words(device_kind)}) yet"
    if workers is None:
        return "its data-loader workers are not known (swift's default: `workbench schema --swift` reads it)"
    if workers and "loader_worker" not in known:
        return f"{workers} data-loader worker(s), and no finished run on this machine measured one yet"
    return None


def _count(evidence: Evidence) -> str:
    return f"{len(evidence.run_ids)} run{'s' if len(evidence.run_ids) != 1 else ''}"


def _ids(evidence: Evidence) -> str:
    ids = evidence.run_ids
    more = len(ids) - SHOWN_RUN_IDS
    return ", ".join(ids[:SHOWN_RUN_IDS]) + (f" and {more} more" if more > 0 else "")


def _kind_words(device_kind: str) -> str:
    return "on the CPU" if device_kind == CPU else f"on {device_kind}"


def device_kind(on_cpu: bool, gpu_ids: list[int] | None = None) -> str:
    """What a run of the profile trains on here: "cpu", or the name of the first of its GPUs (NVML)."""
    if on_cpu:
        return CPU
    from backend.hardware.machine import detect_hardware

    gpus = [g for g in detect_hardware().gpus if not gpu_ids or g.index in gpu_ids]
    return gpus[0].name if gpus and gpus[0].name else "a GPU"  # none here, or NVML does not name it


def swift_workers(explicit: int | None) -> int | None:
    """Data-loader workers of a run: the profile's, else swift's own default as its schema says (cached;
    None until swift's schema has been read)."""
    if explicit is not None:
        return explicit
    from backend.oracle.swift_args_answer import cached_schema_answer

    answer = cached_schema_answer() or {}
    fields = answer.get("commands", {}).get("sft", {}).get("fields", [])
    default = next((f.get("default") for f in fields if f.get("name") == "dataloader_num_workers"), None)
    return default if isinstance(default, int) and not isinstance(default, bool) else None
