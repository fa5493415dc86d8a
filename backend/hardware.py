"""What this machine has: NVIDIA GPUs through NVML, CPU cores and RAM through psutil.

No torch import: NVML answers in milliseconds and works in the TUI process (sampling it
periodically is the caller's job, in a worker thread). Every NVML query is N/A tolerant,
as nvitop does it: a query the driver does not support, or may not answer (no
permission, a lost GPU, an old binding without the function), leaves that one field None
and names it in `GpuInfo.unavailable` instead of failing the whole inventory. With no
NVIDIA driver or no NVML at all, `nvml_error` says so once and everything else goes on.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, TypeVar

import psutil

T = TypeVar("T")
GIB = 2**30
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None
    name: str | None = None  # None when the process is not visible from here (another container)
    kind: Literal["compute", "graphics"] = "compute"


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_percent: int | None = None
    compute_capability: tuple[int, int] | None = None
    processes: tuple[GpuProcess, ...] = ()
    memory_utilization_percent: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    # NVML's own `free` (total - used - reserved by the driver); None when not asked or N/A
    reported_free_bytes: int | None = None
    unavailable: tuple[str, ...] = ()  # fields NVML answered N/A for

    @property
    def memory_free_bytes(self) -> int | None:
        if self.reported_free_bytes is not None:
            return self.reported_free_bytes
        if self.memory_total_bytes is None or self.memory_used_bytes is None:
            return None
        return self.memory_total_bytes - self.memory_used_bytes

    @property
    def supports_bf16(self) -> bool | None:
        """bf16 tensor cores arrived with Ampere (compute capability 8.0)."""
        return None if self.compute_capability is None else self.compute_capability >= (8, 0)

    def describe(self) -> str:
        """One line: `0: NVIDIA A100 80GB  12.0/80.0 GiB used, 63.5 free  util 45%  sm 8.0 bf16  2 procs`."""

        def gib(value: int | None) -> str:
            return "N/A" if value is None else f"{value / GIB:.1f}"

        util = "N/A" if self.utilization_percent is None else f"{self.utilization_percent}%"
        cc = "sm N/A" if self.compute_capability is None else "sm {}.{}".format(*self.compute_capability)
        bf16 = {True: "bf16", False: "no bf16", None: "bf16 N/A"}[self.supports_bf16]
        return (f"{self.index}: {self.name}  {gib(self.memory_used_bytes)}/{gib(self.memory_total_bytes)} GiB used, "
                f"{gib(self.memory_free_bytes)} free  util {util}  {cc} {bf16}  {len(self.processes)} procs")


@dataclass(frozen=True)
class HardwareInfo:
    gpus: tuple[GpuInfo, ...] = ()
    nvml_error: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    ram_total_bytes: int = field(default_factory=lambda: psutil.virtual_memory().total)
    driver_version: str | None = None

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

    def gpu(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def describe(self) -> str:
        if not self.gpus:
            reason = f" ({self.nvml_error})" if self.nvml_error else ""
            return f"no NVIDIA GPU{reason}; {self.cpu_count} CPU cores, {self.ram_total_bytes / 2**30:.0f} GiB RAM"
        names = ", ".join(f"{g.index}: {g.name}" for g in self.gpus)
        return f"{len(self.gpus)} GPU(s) [{names}]; {self.cpu_count} CPU cores"


# ---------------------------------------------------------------- GPU selection


def pick_gpus(hardware: HardwareInfo, n: int) -> list[int]:
    """The `n` GPUs with the most free memory (ties: lower index first), in index order.

    GPUs whose free memory NVML could not tell come last.
    """
    if n < 1:
        raise ValueError(f"asked for {n} GPUs; ask for at least 1")
    if n > len(hardware.gpus):
        raise ValueError(f"asked for {n} GPUs, this machine has {len(hardware.gpus)} ({hardware.describe()})")

    def most_free_first(gpu: GpuInfo) -> tuple[bool, int, int]:
        free = gpu.memory_free_bytes
        return (free is None, -(free or 0), gpu.index)

    return sorted(g.index for g in sorted(hardware.gpus, key=most_free_first)[:n])


def visible_devices_env(gpu_ids: list[int]) -> dict[str, str]:
    """Environment that makes exactly `gpu_ids` (NVML numbering) visible to CUDA.

    NVML numbers GPUs in PCI bus order; CUDA by default numbers them fastest first. Without
    CUDA_DEVICE_ORDER=PCI_BUS_ID, id 1 in CUDA_VISIBLE_DEVICES can be a different card than
    NVML's GPU 1 on a box with mixed GPUs.
    """
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids)}


# ---------------------------------------------------------------- NVML


class _Queries:
    """Runs NVML queries for one device, remembering which ones answered N/A."""

    def __init__(self, nvml: ModuleType):
        self.na_errors: tuple[type[BaseException], ...] = (
            getattr(nvml, "NVMLError", RuntimeError),
            AttributeError,  # the binding lacks the function (old nvidia-ml-py)
            NotImplementedError,
        )
        self.unavailable: list[str] = []

    def ask(self, field_name: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except self.na_errors:
            self.unavailable.append(field_name)
            return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


def _processes(nvml: ModuleType, handle: Any, ask: Callable[..., Any]) -> tuple[GpuProcess, ...]:
    found: dict[int, GpuProcess] = {}
    for kind, function in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                           ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        for proc in ask(f"{kind}_processes", lambda f=function: getattr(nvml, f)(handle)) or []:
            if proc.pid not in found:
                # pynvml turns NVML_VALUE_NOT_AVAILABLE into None itself
                used = getattr(proc, "usedGpuMemory", None)
                found[proc.pid] = GpuProcess(proc.pid, used, _process_name(proc.pid), kind)  # type: ignore[arg-type]
    return tuple(found.values())


def gpu_info(nvml: ModuleType, index: int) -> GpuInfo:
    """One device's inventory; every field that NVML cannot answer stays None."""
    queries = _Queries(nvml)
    ask = queries.ask
    handle = ask("handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        return GpuInfo(index=index, name=f"GPU {index} (not answering)", unavailable=tuple(queries.unavailable))
    name = ask("name", lambda: nvml.nvmlDeviceGetName(handle))
    memory = ask("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    util = ask("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    capability = ask("compute_capability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    uuid = ask("uuid", lambda: nvml.nvmlDeviceGetUUID(handle))
    pci = ask("pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle))
    processes = _processes(nvml, handle, ask)
    return GpuInfo(
        index=index,
        name=_text(name) if name is not None else f"GPU {index}",
        memory_total_bytes=getattr(memory, "total", None),
        memory_used_bytes=getattr(memory, "used", None),
        reported_free_bytes=getattr(memory, "free", None),
        utilization_percent=getattr(util, "gpu", None),
        memory_utilization_percent=getattr(util, "memory", None),
        compute_capability=(int(capability[0]), int(capability[1])) if capability else None,
        uuid=_text(uuid) if uuid is not None else None,
        pci_bus_id=_text(pci.busId) if pci is not None and hasattr(pci, "busId") else None,
        processes=processes,
        unavailable=tuple(queries.unavailable),
    )


def inventory(nvml: ModuleType) -> HardwareInfo:
    """Everything NVML tells about this machine; `nvml` is the (initialised) pynvml module."""
    queries = _Queries(nvml)
    count = queries.ask("device_count", nvml.nvmlDeviceGetCount)
    if count is None:
        return HardwareInfo(nvml_error="NVML could not count the GPUs")
    cuda = queries.ask("cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion)
    driver = queries.ask("driver_version", nvml.nvmlSystemGetDriverVersion)
    return HardwareInfo(
        gpus=tuple(gpu_info(nvml, i) for i in range(count)),
        cuda_driver_version=(cuda // 1000, (cuda % 1000) // 10) if cuda else None,
        driver_version=_text(driver) if driver is not None else None,
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
        return inventory(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # shutting down a half-working NVML must not hide its answer
            pass


@functools.cache
def detect_hardware() -> HardwareInfo:
    """The machine's hardware, asked once per process (and said once when there is no GPU)."""
    hardware = query_hardware()
    if not hardware.gpus:
        logger.info("%s", hardware.describe())
    return hardware
