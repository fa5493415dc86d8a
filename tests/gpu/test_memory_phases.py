"""#26 on a real GPU: a short run of the embedded model measures every phase of the timeline with torch's
peaks (reset per phase) and NVML's used memory, and status compares each with its forecast. It skips with
the reason on a machine without an NVIDIA GPU (the CPU side is tests/estimate/test_estimate_phase_measured)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.hardware.machine import query_hardware
from backend.runs.memory_report import memory_comparison
from bench.gpu_check import run_case
from bench.memory_phases_gpu import quickstart

HARDWARE = query_hardware()
NO_GPU = f"needs an NVIDIA GPU; this machine has none ({HARDWARE.nvml_error or 'NVML lists no GPU'})"
PHASES = {"load", "first_step", "optimizer_step", "steady_step", "eval", "save"}

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HARDWARE.gpus, reason=NO_GPU)]


def test_each_phase_is_measured_on_the_gpu_beside_its_forecast(tiny_model: Path, isolated_runs: Path) -> None:
    run = run_case(quickstart("cuda"), isolated_runs, timeout_s=600)
    comparison = memory_comparison(run)
    print("\n".join(comparison["lines"]))  # the bench's table, in the test's output (-s)
    measured = {(row["phase"], row["kind"]) for row in comparison["phase_rows"]}
    for kind in ("cuda_max_reserved_bytes", "cuda_max_allocated_bytes", "nvml_used_bytes", "host_rss_bytes"):
        assert {phase for phase, k in measured if k == kind} == PHASES, kind
    assert all(row["error_percent"] is not None for row in comparison["phase_rows"])
