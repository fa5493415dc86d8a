"""Memory and utilisation while a run trains: per GPU through NVML, host RAM, the run's processes.

Meant for a background thread: `SystemMonitor.run(on_sample, stop)` samples every
`interval` seconds until the `threading.Event` is set and reports through plain callbacks
(the TUI turns them into messages). Every NVML query is N/A tolerant: a field the driver
does not support stays None. When NVML cannot start (no NVIDIA driver, no GPU) the sample
says why once, in `gpu_error`, and the monitor never asks NVML again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from backend.runs.process import run_processes


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


def _na(call: Callable[[], Any]) -> Any:
    """One NVML query; None when the driver says not supported, no permission, etc."""
    try:
        return call()
    except Exception:  # pynvml raises one NVMLError subclass per error code
        return None


def _run_memory(procs: list[Any] | None, ours: list[Any]) -> int | None:
    """GPU memory of the run's processes on one GPU; None when NVML cannot tell.

    usedGpuMemory is None under MIG and in some containers, where NVML also reports pids
    of another namespace: then no process of the run is recognised."""
    if procs is None:
        return None
    used = [getattr(p, "usedGpuMemory", None) for p in ours]
    if any(u is None for u in used):
        return None
    return sum(used)


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
        self._nvml: Any = None
        self._nvml_error: str | None = None

    # ------------------------------------------------------------ NVML

    def _start_nvml(self) -> Any:
        if self._nvml is not None or self._nvml_error is not None:
            return self._nvml
        if os.environ.get("WORKBENCH_FAKE_NO_GPU"):
            self._nvml_error = "no NVIDIA GPU (disabled by WORKBENCH_FAKE_NO_GPU)"
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as err:  # no library, no driver, no device, no permission
            self._nvml_error = f"no NVIDIA GPU / NVML unavailable ({err})"
            return None
        self._nvml = pynvml
        return pynvml

    def close(self) -> None:
        if self._nvml is not None:
            _na(self._nvml.nvmlShutdown)
            self._nvml = None

    def _gpus(self, run_pids: set[int]) -> tuple[GpuSample, ...]:
        nvml = self._start_nvml()
        if nvml is None:
            return ()
        count = _na(nvml.nvmlDeviceGetCount) or 0
        return tuple(self._gpu(nvml, index, run_pids) for index in range(count))

    @staticmethod
    def _gpu(nvml: Any, index: int, run_pids: set[int]) -> GpuSample:
        handle = _na(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return GpuSample(index, f"GPU {index}")
        name = _na(lambda: nvml.nvmlDeviceGetName(handle)) or f"GPU {index}"
        memory = _na(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        util = _na(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        procs = _na(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        ours = [p for p in procs or [] if p.pid in run_pids]
        return GpuSample(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            memory_used=getattr(memory, "used", None),
            memory_total=getattr(memory, "total", None),
            utilization=getattr(util, "gpu", None),
            run_memory=_run_memory(procs, ours) if run_pids else None,
            run_process_count=len(ours),
        )

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
            gpus=self._gpus(pids),
            gpu_error=self._nvml_error,
            run_rss=rss,
            run_pids=tuple(sorted(pids)),
        )

    def run(
        self,
        on_sample: Callable[[SystemSample], None],
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
