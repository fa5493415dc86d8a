"""Stand-ins for what a test machine lacks: hardware descriptions with a GPU machine's answers, and fake
commands (sacct, sky, sbatch ...) put first on PATH as small scripts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from backend.hardware.machine import GpuInfo, HardwareInfo

GIB = 2**30


def gpu_box(count: int = 2, capability: tuple[int, int] = (8, 0), memory_gib: int = 80,
            name: str = "NVIDIA A100-SXM4-80GB") -> HardwareInfo:
    gpus = tuple(GpuInfo(index=i, name=name, memory_total_bytes=memory_gib * GIB, memory_used_bytes=GIB,
                         utilization_percent=0, compute_capability=capability) for i in range(count))
    return HardwareInfo(gpus=gpus, cuda_driver_version=(12, 4), cpu_count=32, ram_total_bytes=512 * GIB)


CPU_BOX = HardwareInfo(nvml_error="NVML unavailable: test", cpu_count=2, ram_total_bytes=24 * GIB)
TURING_BOX = gpu_box(count=2, capability=(7, 5), memory_gib=16, name="Tesla T4")


def fake_executable(bin_dir: Path, name: str, text: str) -> Path:
    """The script `text` as the executable `bin_dir/name` (the folder made if missing)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(text)
    script.chmod(0o755)
    return script


def fake_commands(folder: Path, scripts: Mapping[str, str], folder_variable: str,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each script of `scripts` (name -> text) an executable in `folder/bin`, first on PATH; the variable
    `folder_variable` names `folder`, where the scripts keep their log and read their answers."""
    for name, text in scripts.items():
        fake_executable(folder / "bin", name, text)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv(folder_variable, str(folder))
    return folder
