"""What this machine has: NVIDIA GPUs through nvitop (NVML), CPU cores and RAM through psutil.

No torch import: NVML answers in milliseconds and works in the TUI process (sampling it
periodically is the caller's job, in a worker thread). `NvidiaGpus` is the one adapter over
nvitop's `Device` API, used by the inventory here, the system monitor and the watchdog's
probes. Every query is N/A tolerant: a field the driver does not support, or may not answer
(no permission, MIG, a lost GPU), is None and named in `GpuInfo.unavailable` instead of
failing the whole inventory. With no NVIDIA driver or no NVML at all, `nvml_error` says so
once and everything else goes on.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, TypeVar

import psutil

from backend.core.units import gib

T = TypeVar("T")
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
    mig_slices: int = 0  # MIG instances of this GPU (0: MIG off); its utilisation is then N/A

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

        util = "N/A" if self.utilization_percent is None else f"{self.utilization_percent}%"
        cc = "sm N/A" if self.compute_capability is None else "sm {}.{}".format(*self.compute_capability)
        bf16 = {True: "bf16", False: "no bf16", None: "bf16 N/A"}[self.supports_bf16]
        return (f"{self.index}: {self.name}  {gib(self.memory_used_bytes)}/{gib(self.memory_total_bytes)} GiB used, "
                f"{gib(self.memory_free_bytes)} free  util {util}  {cc} {bf16}  {len(self.processes)} procs"
                + (f"  MIG {self.mig_slices} slices" if self.mig_slices else ""))


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

    def free_memory(self) -> dict[int, int | None]:
        """Each GPU's free memory as NVML told it (other processes counted): the GPU choice's readings."""
        return {gpu.index: gpu.memory_free_bytes for gpu in self.gpus}

    def gpu(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def describe(self) -> str:
        if not self.gpus:
            reason = f" ({self.nvml_error})" if self.nvml_error else ""
            return f"no NVIDIA GPU{reason}; {self.cpu_count} CPU cores, {gib(self.ram_total_bytes, 0)} GiB RAM"
        names = ", ".join(f"{g.index}: {g.name}" for g in self.gpus)
        return f"{len(self.gpus)} GPU(s) [{names}]; {self.cpu_count} CPU cores"


# ---------------------------------------------------------------- GPU selection


def pick_gpus(hardware: HardwareInfo, n: int) -> list[int]:
    """The `n` GPUs the one rule (backend/hardware/gpu_choice.py, nvitop's `select_devices`) picks by
    free memory, in index order. GPUs whose free memory NVML could not tell come last."""
    from backend.hardware.gpu_choice import choose_gpus

    if n < 1:
        raise ValueError(f"asked for {n} GPUs; ask for at least 1")
    if n > len(hardware.gpus):
        raise ValueError(f"asked for {n} GPUs, this machine has {len(hardware.gpus)} ({hardware.describe()})")
    return choose_gpus(hardware.free_memory(), n)


def visible_devices_env(gpu_ids: list[int]) -> dict[str, str]:
    """Environment that makes exactly `gpu_ids` (NVML numbering) visible to CUDA.

    NVML numbers GPUs in PCI bus order; CUDA by default numbers them fastest first. Without
    CUDA_DEVICE_ORDER=PCI_BUS_ID, id 1 in CUDA_VISIBLE_DEVICES can be a different card than
    NVML's GPU 1 on a box with mixed GPUs.
    """
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids)}


# ---------------------------------------------------------------- NVML, through nvitop


class NvidiaGpus:
    """This machine's NVIDIA GPUs through nvitop's `Device` API (N/A- and MIG-aware), opened on the
    first read. When NVML cannot start, `error` says why once and NVML is never asked again.

    nvitop is imported here, not at the top: the TUI's start-up path does not pay for it."""

    def __init__(self) -> None:
        self._devices: list[Any] | None = None
        self.error: str | None = None

    def _open(self) -> list[Any]:
        if self._devices is not None or self.error is not None:
            return self._devices or []
        if os.environ.get("WORKBENCH_FAKE_NO_GPU"):
            self.error = "disabled by WORKBENCH_FAKE_NO_GPU"
            return []
        try:
            nvitop = _nvitop()
            count = nvitop.Device.count()  # NVML starts here: no library, no driver, no permission
        except Exception as err:
            self.error = f"NVML unavailable: {err}"
            return []
        self._devices = [_device(nvitop, index) for index in range(count)]
        return self._devices

    def read(self, processes: bool = True) -> tuple[GpuInfo, ...]:
        """Every GPU now (a few NVML calls each); `processes=False` skips the process lists."""
        return tuple(gpu_info(device, index, processes) for index, device in enumerate(self._open()))

    def versions(self) -> tuple[tuple[int, int] | None, str | None]:
        """(the CUDA version the driver supports, the driver's version); None where N/A."""
        self._open()
        if self.error:
            return None, None
        device = _nvitop().Device
        cuda = _known(device.cuda_driver_version())
        major, _, minor = (cuda or "").partition(".")
        parsed = (int(major), int(minor.partition(".")[0] or 0)) if major.isdigit() else None
        return parsed, _known(device.driver_version())


_QUIET = logging.NullHandler()


def tree_rss_bytes(root: psutil.Process) -> int:
    """Host RSS of a process and all its children (a child that exits meanwhile counts nothing)."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = [root]
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def _nvitop() -> ModuleType:
    import nvitop

    # nvitop logs a coloured "FATAL ERROR" banner (to stderr, over the TUI) when NVML is missing;
    # the app says it in one line instead
    logging.getLogger("nvitop").addHandler(_QUIET)
    logging.getLogger("nvitop").propagate = False
    return nvitop


def _device(nvitop: ModuleType, index: int) -> Any | None:
    try:
        return nvitop.Device(index)
    except Exception:  # NotFound / InvalidArgument: the GPU went away between count and handle
        return None


def _known(value: T) -> T | None:
    """nvitop's N/A (a str subclass) as None; any other value as it is."""
    from nvitop import NaType

    return None if isinstance(value, NaType) else value


class _Fields:
    """Reads one device's values, naming each field that came back N/A."""

    def __init__(self) -> None:
        self.unavailable: list[str] = []

    def get(self, name: str, value: T) -> T | None:
        known = _known(value)
        if known is None:
            self.unavailable.append(name)
        return known


def gpu_info(device: Any | None, index: int, processes: bool = True) -> GpuInfo:
    """One nvitop device as the app's `GpuInfo`; every field NVML cannot answer stays None."""
    if device is None or device.handle is None:  # nvitop keeps a lost GPU with no handle
        return GpuInfo(index=index, name=f"GPU {index} (not answering)", unavailable=("handle",))
    fields = _Fields()
    memory = device.memory_info()
    util = device.utilization_rates()
    capability = fields.get("compute_capability", device.cuda_compute_capability())
    mig = device.is_mig_mode_enabled()
    return GpuInfo(
        index=index,
        name=fields.get("name", device.name()) or f"GPU {index}",
        memory_total_bytes=fields.get("memory", memory.total),
        memory_used_bytes=_known(memory.used),
        reported_free_bytes=_known(memory.free),
        utilization_percent=fields.get("utilization", util.gpu),
        memory_utilization_percent=_known(util.memory),
        compute_capability=(int(capability[0]), int(capability[1])) if capability else None,
        uuid=fields.get("uuid", device.uuid()),
        pci_bus_id=fields.get("pci_bus_id", device.bus_id()),
        processes=_processes(device.mig_devices() if mig else [device]) if processes else (),
        mig_slices=len(device.mig_devices()) if mig else 0,
        unavailable=tuple(fields.unavailable),
    )


def _processes(leaves: list[Any]) -> tuple[GpuProcess, ...]:
    """The processes on a GPU, or on each MIG slice of it (where NVML tells per-process memory)."""
    found: dict[int, GpuProcess] = {}
    for leaf in leaves:
        for pid, proc in leaf.processes().items():
            if pid not in found:
                kind: Literal["compute", "graphics"] = "graphics" if _known(proc.type) == "G" else "compute"
                found[pid] = GpuProcess(pid, _known(proc.gpu_memory()), _process_name(pid), kind)
    return tuple(found.values())


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


def query_hardware() -> HardwareInfo:
    """Ask NVML now (tens of milliseconds); use `detect_hardware` for the cached answer."""
    gpus = NvidiaGpus()
    found = gpus.read()
    if gpus.error:
        return HardwareInfo(nvml_error=gpus.error)
    cuda, driver = gpus.versions()
    return HardwareInfo(gpus=found, cuda_driver_version=cuda, driver_version=driver)


def trains_on_cpu(device: str, hardware: HardwareInfo | None) -> bool:
    """Whether a run with this `[distribution] device` trains on the CPU: 'cpu', or 'auto' on a machine
    without CUDA (unknown hardware: only an explicit 'cpu'). The launch, its precision and the forecast
    all ask this one question."""
    return device == "cpu" or (device == "auto" and hardware is not None and not hardware.has_cuda)


@functools.cache
def detect_hardware() -> HardwareInfo:
    """The machine's hardware, asked once per process (and said once when there is no GPU)."""
    hardware = query_hardware()
    if not hardware.gpus:
        logger.info("%s", hardware.describe())
    return hardware
