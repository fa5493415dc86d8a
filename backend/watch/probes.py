"""Readings of the machine for the watchdog: disk, host RAM, GPUs, the run's processes.

Each reading is a small function so a test can give the watchdog a fake one;
WORKBENCH_FAKE_DISK_FREE_BYTES replaces the free-space reading (for tests and drills).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import psutil

from backend.contract.events import RunBegin
from backend.core.fs import tree_size
from backend.hardware.machine import NvidiaGpus

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1}
ADAM_STATE_BYTES = 8  # exp_avg + exp_avg_sq in fp32 per trainable parameter


def disk_free(folder: Path) -> int:
    fake = os.environ.get("WORKBENCH_FAKE_DISK_FREE_BYTES")
    if fake:
        return int(fake)
    path = Path(folder)
    while not path.exists() and path != path.parent:  # the output folder may not exist yet
        path = path.parent
    return shutil.disk_usage(path).free


def folder_size(path: Path) -> int:
    """Bytes under `path`; 0 for a folder that is not there (rotated away meanwhile)."""
    try:
        return tree_size(path)
    except FileNotFoundError:
        return 0


def checkpoint_forecast(checkpoints: list[Path], run_begin: RunBegin | None) -> tuple[int | None, str]:
    """(bytes the next checkpoint will take, what the figure is based on).

    The last complete checkpoint, when there is one, is the best forecast of the next. Before
    the first: saved weights (adapter in fp32, or the whole model in its dtype) + AdamW states."""
    complete = [c for c in checkpoints if (c / "trainer_state.json").is_file()]
    if complete:
        return folder_size(complete[-1]), f"size of {complete[-1].name}"
    if not run_begin or not run_begin.trainable_params:
        return None, "nothing known yet"
    trainable, total = run_begin.trainable_params, run_begin.total_params or 0
    world = run_begin.world_size or 1
    adapter = trainable < total / 2
    weights = trainable * 4 if adapter else total * DTYPE_BYTES.get(str(run_begin.param_dtype), 4)
    # the optimizer state is saved once in all (sharded or not) and rng states per rank
    size = weights + trainable * ADAM_STATE_BYTES + world * 16_384 + 1_000_000
    return size, ("adapter" if adapter else "full weights") + " + AdamW states, from the parameter counts"


def host_memory() -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


class GpuReader:
    """Used/total memory per GPU through the hardware module's one nvitop adapter; empty without GPUs."""

    def __init__(self) -> None:
        self._gpus = NvidiaGpus()

    def read(self) -> list[tuple[int, int | None, int | None]]:
        return [(g.index, g.memory_used_bytes, g.memory_total_bytes) for g in self._gpus.read(processes=False)]

    def close(self) -> None:
        """Nothing to release (nvitop shuts NVML down at exit); kept for the watchdog's readers."""


def process_table(processes: list[psutil.Process]) -> list[dict[str, Any]]:
    """What each process of the run is doing: for a hang alert's evidence."""
    rows = []
    for proc in processes:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rows.append({"pid": proc.pid, "status": proc.status(), "cpu_seconds": round(times.user + times.system, 1),
                             "command": " ".join(proc.cmdline())[:200]})
        except psutil.Error:
            continue
    return rows
