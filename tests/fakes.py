"""Hardware descriptions used by tests that need a GPU machine's answers on a CPU machine."""

from __future__ import annotations

from backend.hardware.machine import GpuInfo, HardwareInfo

GIB = 2**30


def gpu_box(count: int = 2, capability: tuple[int, int] = (8, 0), memory_gib: int = 80,
            name: str = "NVIDIA A100-SXM4-80GB") -> HardwareInfo:
    gpus = tuple(GpuInfo(index=i, name=name, memory_total_bytes=memory_gib * GIB, memory_used_bytes=GIB,
                         utilization_percent=0, compute_capability=capability) for i in range(count))
    return HardwareInfo(gpus=gpus, cuda_driver_version=(12, 4), cpu_count=32, ram_total_bytes=512 * GIB)


CPU_BOX = HardwareInfo(nvml_error="NVML unavailable: test", cpu_count=2, ram_total_bytes=24 * GIB)
TURING_BOX = gpu_box(count=2, capability=(7, 5), memory_gib=16, name="Tesla T4")
