"""Memory and utilisation while a run trains: per GPU (the hardware module's nvitop adapter), host
RAM, the run's processes.

Meant for a background thread: `SystemMonitor.run(on_sample, stop)` samples every
`interval` seconds until the `threading.Event` is set and reports through plain callbacks
(the TUI turns them into messages). A field the driver does not support stays None. When
NVML cannot start (no NVIDIA driver, no GPU) every sample says why, in `gpu_error`, and the
monitor never asks NVML again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from backend.core.process_identity import run_processes
from backend.hardware.machine import GpuInfo, NvidiaGpus


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    memory_used: int | None = None
    memory_total: int | None = None
    utilization: int | None = None  # percent of time a kernel ran
    run_memory: int | None = None  # GPU memory of the run's processes; None when NVML cannot tell
    run_process_count: int = 0


@dataclass(frozen=True)
class SystemSample:
    time: float
    host_total: int
    host_used: int
    host_available: int
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None  # why there is no GPU information (said once, in every sample)
    run_rss: int | None = None  # RSS summed over the run's process tree; None without a run
    run_pids: tuple[int, ...] = ()


def _run_memory(gpu: GpuInfo, run_pids: set[int]) -> tuple[int | None, int]:
    """(GPU memory of the run's processes on one GPU, how many there are); the memory is None when
    NVML cannot tell it for one of them (N/A in some containers and on a MIG GPU without slices)."""
    used = [p.used_memory_bytes for p in gpu.processes if p.pid in run_pids]
    return (None if None in used else sum(u for u in used if u is not None)), len(used)


def gpu_sample(gpu: GpuInfo, run_pids: set[int]) -> GpuSample:
    run_memory, count = _run_memory(gpu, run_pids)
    return GpuSample(gpu.index, gpu.name, gpu.memory_used_bytes, gpu.memory_total_bytes, gpu.utilization_percent,
                     run_memory if run_pids else None, count)


class SystemMonitor:
    """Samples the machine and, when given a run folder, the run's process tree."""

    def __init__(
        self,
        run_dir: Path | None = None,
        pids: Callable[[], Iterable[int | None]] = tuple,
        interval: float = 2.0,
    ):
        self.run_dir = Path(run_dir) if run_dir else None
        self.pids = pids  # known pids of the run (supervisor, launcher), read fresh each sample
        self.interval = interval
        self._gpus = NvidiaGpus()

    # ------------------------------------------------------------ GPUs

    @property
    def gpu_error(self) -> str | None:
        """Why there is no GPU information (None while NVML answers or has not been asked)."""
        return f"no NVIDIA GPU ({self._gpus.error})" if self._gpus.error else None

    def close(self) -> None:
        """Nothing to release: nvitop keeps NVML open for the process and shuts it down at exit."""

    # ------------------------------------------------------------ processes

    def _run_tree(self) -> tuple[list[psutil.Process], int | None]:
        if self.run_dir is None:
            return [], None
        found = {p.pid: p for p in run_processes(self.run_dir, tuple(self.pids()))}
        for proc in list(found.values()):  # children too, marked or not (an exec'd tool may drop the env)
            try:
                found.update({child.pid: child for child in proc.children(recursive=True)})
            except psutil.Error:
                continue
        total, any_alive = 0, False
        for proc in found.values():
            try:
                total += proc.memory_info().rss
                any_alive = True
            except psutil.Error:
                continue
        return list(found.values()), total if any_alive else None

    # ------------------------------------------------------------ sampling

    def sample(self) -> SystemSample:
        """One sample now (tens of milliseconds: a process scan and a few NVML calls)."""
        procs, rss = self._run_tree()
        pids = {p.pid for p in procs}
        memory = psutil.virtual_memory()
        return SystemSample(
            time=time.time(),
            host_total=memory.total,
            host_used=memory.total - memory.available,
            host_available=memory.available,
            gpus=tuple(gpu_sample(gpu, pids) for gpu in self._gpus.read()),
            gpu_error=self.gpu_error,
            run_rss=rss,
            run_pids=tuple(sorted(pids)),
        )

    def run(
        self,
        on_sample: Callable[[SystemSample], object],  # its answer is not used
        stop: threading.Event,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        """Sample until `stop` is set; a failed sample is reported and sampling goes on."""
        try:
            while not stop.is_set():
                try:
                    on_sample(self.sample())
                except Exception as err:
                    if on_error is None:
                        raise
                    on_error(err)
                stop.wait(self.interval)
        finally:
            self.close()
