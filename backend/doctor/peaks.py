"""Datasheet peaks of the GPUs the doctor knows, dense (no 2:4 sparsity), by the name torch or NVML gives.

Never a measured matmul: a measured rate is what the run achieves, not what the chip can do, and dividing by
it is how MFU comes out near 100 % for a slow run. A GPU not in the table is said unknown. fp32 is the plain
(non-tensor-core) rate: torch does not use TF32 for matmuls unless asked (`allow_tf32`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA = 1e12


@dataclass(frozen=True)
class GpuPeak:
    name: str  # the table's name for it
    bf16: float  # TFLOPS, tensor cores, fp32 accumulate (fp16 is the same rate on every GPU here)
    fp32: float
    flash_attention: bool  # compute capability 8.0 or newer (FlashAttention 2)
    source: str

    def tflops(self, precision: str) -> float:
        return self.fp32 if precision == "fp32" else self.bf16


# (pattern over the lower-case device name, peak); the first match wins, so the longer names come first
_TABLE: tuple[tuple[str, GpuPeak], ...] = (
    (r"h200.*nvl", GpuPeak("H200 NVL", 835.0, 60.0, True, "NVIDIA H200 NVL datasheet")),
    (r"h200", GpuPeak("H200 SXM", 989.0, 67.0, True, "NVIDIA H200 datasheet")),
    (r"h100.*nvl", GpuPeak("H100 NVL", 835.0, 60.0, True, "NVIDIA H100 datasheet")),
    (r"h100.*pcie", GpuPeak("H100 PCIe", 756.0, 51.0, True, "NVIDIA H100 datasheet")),
    (r"h100", GpuPeak("H100 SXM", 989.0, 67.0, True, "NVIDIA H100 datasheet")),
    (r"a100", GpuPeak("A100", 312.0, 19.5, True, "NVIDIA A100 datasheet")),
    (r"l40s", GpuPeak("L40S", 362.0, 91.6, True, "NVIDIA L40S datasheet")),
    (r"\ba10\b", GpuPeak("A10", 125.0, 31.2, True, "NVIDIA A10 datasheet")),
    (r"4090", GpuPeak("GeForce RTX 4090", 165.2, 82.6, True, "NVIDIA Ada whitepaper (fp32 accumulate)")),
    (r"3090", GpuPeak("GeForce RTX 3090", 71.0, 35.6, True, "NVIDIA Ampere GA102 whitepaper (fp32 accumulate)")),
)


def gpu_peak(device_name: str | None) -> GpuPeak | None:
    """The datasheet entry of a device name ("NVIDIA H100 80GB HBM3"), None when the table does not know it."""
    if not device_name:
        return None
    lower = device_name.lower()
    return next((peak for pattern, peak in _TABLE if re.search(pattern, lower)), None)
