"""What this machine has: NVIDIA GPUs through NVML, CPU cores and RAM through psutil.

No torch import: NVML answers in milliseconds and works in the TUI process. Every NVML
query is N/A tolerant (as nvitop does it): a query a driver does not support leaves
that field None instead of failing the whole inventory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil

T = TypeVar("T")


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_percent: int | None = None
    compute_capability: tuple[int, int] | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_free_bytes(self) -> int | None:
        if self.memory_total_bytes is None or self.memory_used_bytes is None:
            return None
        return self.memory_total_bytes - self.memory_used_bytes

    @property
    def supports_bf16(self) -> bool | None:
        """bf16 tensor cores arrived with Ampere (compute capability 8.0)."""
        return None if self.compute_capability is None else self.compute_capability >= (8, 0)


@dataclass(frozen=True)
class HardwareInfo:
    gpus: tuple[GpuInfo, ...] = ()
    nvml_error: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    ram_total_bytes: int = field(default_factory=lambda: psutil.virtual_memory().total)

    @property
    def has_cuda(self) -> bool:
        return bool(self.gpus)

    @property
    def bf16_ready(self) -> bool:
        """The seed's readiness check, from NVML: CUDA >= 11 and bf16-capable GPUs.

        (NCCL >= 2.10 ships with every CUDA 11+ build of torch, so it follows from the driver.)
        """
        return (
            self.has_cuda
            and self.cuda_driver_version is not None
            and self.cuda_driver_version >= (11, 0)
            and all(gpu.supports_bf16 for gpu in self.gpus)
        )

    def describe(self) -> str:
        if not self.gpus:
            reason = f" ({self.nvml_error})" if self.nvml_error else ""
            return f"no NVIDIA GPU{reason}; {self.cpu_count} CPU cores, {self.ram_total_bytes / 2**30:.0f} GiB RAM"
        names = ", ".join(f"{g.index}: {g.name}" for g in self.gpus)
        return f"{len(self.gpus)} GPU(s) [{names}]; {self.cpu_count} CPU cores"


def _na(call: Callable[[], T]) -> T | None:
    """Run one NVML query; None when the driver says not supported / no permission."""
    try:
        return call()
    except Exception:  # pynvml raises NVMLError subclasses per error code
        return None


def _gpu_info(pynvml: Any, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = _na(lambda: pynvml.nvmlDeviceGetName(handle)) or f"GPU {index}"
    memory = _na(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    util = _na(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    capability = _na(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    procs = _na(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
    return GpuInfo(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        memory_total_bytes=getattr(memory, "total", None),
        memory_used_bytes=getattr(memory, "used", None),
        utilization_percent=getattr(util, "gpu", None),
        compute_capability=tuple(capability) if capability else None,  # type: ignore[arg-type]
        processes=tuple(GpuProcess(p.pid, getattr(p, "usedGpuMemory", None)) for p in procs),
    )


def query_hardware() -> HardwareInfo:
    """Ask NVML now (tens of milliseconds); use `detect_hardware` for the cached answer."""
    if os.environ.get("WORKBENCH_FAKE_NO_GPU"):
        return HardwareInfo(nvml_error="disabled by WORKBENCH_FAKE_NO_GPU")
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as err:  # no driver, no library, no permission
        return HardwareInfo(nvml_error=f"NVML unavailable: {err}")
    try:
        count = pynvml.nvmlDeviceGetCount()
        driver = _na(pynvml.nvmlSystemGetCudaDriverVersion)
        version = (driver // 1000, (driver % 1000) // 10) if driver else None
        return HardwareInfo(gpus=tuple(_gpu_info(pynvml, i) for i in range(count)), cuda_driver_version=version)
    finally:
        _na(pynvml.nvmlShutdown)


@functools.cache
def detect_hardware() -> HardwareInfo:
    """The machine's hardware, asked once per process."""
    return query_hardware()
