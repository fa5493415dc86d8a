"""The CPU host forecast: a run that trains on the CPU keeps its "device" terms (weights, gradients,
optimizer states, activations, logits) in host RAM, beside the process's own baseline. Without them the host
forecast of a CPU run was the process baseline alone (#37)."""

from __future__ import annotations

from backend.estimate.phases import Phase
from backend.estimate.request import EstimateRequest

ON_GPU_ONLY = ("cuda_context", "allocator_overhead")  # device terms with no host counterpart on the CPU
HOST_TERM = "on_cpu_device"  # the host term that holds them


def device_on_host(phases: tuple[Phase, ...], req: EstimateRequest) -> tuple[Phase, ...]:
    """On the CPU, each phase's host figure gains its device terms for every local process."""
    if not req.trains_on_cpu:
        return phases
    return tuple(Phase(p.name, p.gpu, {**p.host, HOST_TERM: req.num_gpus * device_bytes(p.gpu)}) for p in phases)


def device_bytes(gpu_terms: dict[str, int]) -> int:
    return sum(value for name, value in gpu_terms.items() if name not in ON_GPU_ONLY)
