"""#26: a phase's host measurement is the RSS of the run's process tree (the process and its data-loader
workers), and on CUDA NVML's used memory per GPU is compared with the phase's whole per-GPU forecast."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from backend.contract.event_writer import EventWriter
from backend.contract.events import EVENTS_FILE_NAME, GpuUsed
from backend.hardware.machine import tree_rss_bytes
from backend.rundir.layout import RunFolder
from backend.runs.memory_report import memory_comparison

MIB = 2**20
FORECAST = {"per_device_total_bytes": 2000 * MIB, "host_total_bytes": 8000 * MIB,
            "breakdown": {"cuda_context": 600 * MIB, "allocator_overhead": 100 * MIB}, "peak_phase": "first_step",
            "request": {"num_gpus": 1}, "timeline": [
                {"phase": "first_step", "gpu_total_bytes": 2000 * MIB, "host_total_bytes": 8000 * MIB,
                 "gpu_terms": {"cuda_context": 600 * MIB, "allocator_overhead": 100 * MIB}}]}


def test_status_compares_the_process_trees_rss_and_nvml_per_phase(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    run.forecast_path.write_text(json.dumps(FORECAST))
    writer = EventWriter(tmp_path / EVENTS_FILE_NAME, rank=0)
    writer.write("memory_phase", phase="first_step", step=0, rss_bytes=4000 * MIB, tree_rss_bytes=10000 * MIB,
                 nvml=[GpuUsed(index=0, used=2500 * MIB, total=80000 * MIB), GpuUsed(index=1, used=None)])
    writer.close()
    rows = [(r["kind"], r["forecast_bytes"] // MIB, r["measured_bytes"] // MIB, r["error_percent"])
            for r in memory_comparison(run)["phase_rows"]]
    assert rows == [("nvml_used_bytes", 2000, 2500, -20.0),  # the whole per-GPU total, context included
                    ("host_rss_bytes", 8000, 10000, -20.0)]  # the tree's 10,000 MiB, not the process's 4,000
    lines = memory_comparison(run)["lines"]
    assert "  first step, GPU used (NVML): forecast 1.95 GiB, measured 2.44 GiB, error -20%" in lines


def test_a_process_trees_rss_counts_its_children() -> None:
    me = psutil.Process()
    child = psutil.Popen(["sleep", "30"])
    try:
        own, child_rss = me.memory_info().rss, child.memory_info().rss
        assert tree_rss_bytes(me) - own > child_rss // 2 > 0
    finally:
        child.kill()
        child.wait()
