"""Admission on a real GPU (marked gpu; skipped without one): NVML's free memory as the keeper reads it picks
the GPU, and a forecast larger than the GPU makes the entry wait with the GPU's numbers."""

from __future__ import annotations

import pytest

from backend.hardware.machine import query_hardware
from backend.queue.admission import pick_gpus
from backend.queue.keeper import _gpu_free

HARDWARE = query_hardware()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HARDWARE.gpus, reason="needs an NVIDIA GPU")]
GIB = 1024**3


def test_the_keeper_reads_nvml_and_admits_or_holds_by_the_forecast() -> None:
    free = _gpu_free()
    assert sorted(free) == sorted(g.index for g in HARDWARE.gpus)
    most = max(free, key=lambda i: (free[i] or 0, -i))
    assert pick_gpus(free, set(), "auto", 1, GIB, 0.1) == ([most], None)
    total = max(g.memory_total_bytes or 0 for g in HARDWARE.gpus)
    chosen, why = pick_gpus(free, set(), str(most), 1, total, 0.0)
    assert chosen is None and why is not None and why.startswith(f"GPU {most}: ") and "(forecast + margin)" in why
