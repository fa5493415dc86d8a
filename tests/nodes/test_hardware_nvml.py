"""GPU inventory: NVML answers parsed N/A-tolerantly, GPU selection, and the real no-GPU path."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest

from backend.hardware import GpuInfo, HardwareInfo, inventory, pick_gpus, query_hardware, visible_devices_env

ANSWERS = json.loads((Path(__file__).parent / "fixtures" / "nvml_answers.json").read_text())
GIB = 2**30


def _error(name: str) -> pynvml.NVMLError:
    return getattr(pynvml, f"NVMLError_{name}")(getattr(pynvml, "NVML_ERROR_" + _snake(name).upper()))


def _snake(name: str) -> str:
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name))


def _answer(device: dict[str, Any], key: str) -> Any:
    value = device[key]
    if isinstance(value, dict) and "error" in value:
        raise _error(value["error"])
    return value


def _process(entry: dict[str, Any]) -> types.SimpleNamespace:
    pid = os.getpid() if entry["pid"] == "SELF" else entry["pid"]
    return types.SimpleNamespace(pid=pid, usedGpuMemory=entry["usedGpuMemory"])


def fake_nvml(answers: dict[str, Any] = ANSWERS, calls: list[str] | None = None) -> types.ModuleType:
    """A module with pynvml's functions, answering from the recorded values (errors are pynvml's own)."""
    devices = answers["devices"]
    log = calls if calls is not None else []
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = pynvml.NVMLError  # type: ignore[attr-defined]

    def handle(index: int) -> dict[str, Any]:
        if "handle" in devices[index]:
            _answer(devices[index], "handle")
        return devices[index]

    def name(dev: dict[str, Any]) -> str | bytes:
        return dev["name"] if "name" in dev else dev["name_bytes"].encode()  # older bindings return bytes

    functions = {
        "nvmlInit": lambda: log.append("init"),
        "nvmlShutdown": lambda: log.append("shutdown"),
        "nvmlDeviceGetCount": lambda: len(devices),
        "nvmlSystemGetCudaDriverVersion": lambda: answers["cuda_driver_version"],
        "nvmlSystemGetDriverVersion": lambda: answers["driver_version"],
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetMemoryInfo": lambda d: types.SimpleNamespace(**_answer(d, "memory")),
        "nvmlDeviceGetUtilizationRates": lambda d: types.SimpleNamespace(**_answer(d, "utilization")),
        "nvmlDeviceGetCudaComputeCapability": lambda d: tuple(_answer(d, "compute_capability")),
        "nvmlDeviceGetUUID": lambda d: _answer(d, "uuid"),
        "nvmlDeviceGetPciInfo": lambda d: types.SimpleNamespace(busId=_answer(d, "pci_bus_id").encode()),
        "nvmlDeviceGetComputeRunningProcesses": lambda d: [_process(p) for p in _answer(d, "compute_processes")],
        "nvmlDeviceGetGraphicsRunningProcesses": lambda d: [_process(p) for p in _answer(d, "graphics_processes")],
    }
    for key, function in functions.items():
        setattr(nvml, key, function)
    return nvml


def test_recorded_answers_are_parsed_field_by_field() -> None:
    hw = inventory(fake_nvml())
    a100, t4, lost = hw.gpus
    assert (hw.cuda_driver_version, hw.driver_version, hw.nvml_error) == ((12, 4), "550.54.15", None)
    assert a100.name == "NVIDIA A100-SXM4-80GB" and a100.memory_total_bytes == 85899345920
    assert (a100.memory_used_bytes, a100.memory_free_bytes) == (12465471488, 72904327168)
    assert (a100.utilization_percent, a100.memory_utilization_percent) == (37, 12)
    assert a100.compute_capability == (8, 0) and a100.supports_bf16 is True
    assert a100.pci_bus_id == "00000000:07:00.0" and a100.uuid.startswith("GPU-5b9a")
    mine, other = a100.processes
    assert (mine.pid, mine.used_memory_bytes, mine.name) == (os.getpid(), 11811160064, psutil.Process().name())
    assert (other.used_memory_bytes, other.kind) == (None, "compute")  # NVML_VALUE_NOT_AVAILABLE
    assert a100.unavailable == ("graphics_processes",)
    assert t4.name == "Tesla T4"  # bytes from an older binding
    assert t4.supports_bf16 is False and t4.compute_capability == (7, 5)


def test_not_supported_fields_become_none_and_are_named() -> None:
    _, t4, lost = inventory(fake_nvml()).gpus
    assert t4.utilization_percent is None and t4.memory_utilization_percent is None and t4.uuid is None
    assert set(t4.unavailable) == {"utilization", "uuid"}
    assert t4.memory_total_bytes == 16106127360  # the rest of the device is still there
    assert "util N/A" in t4.describe() and "no bf16" in t4.describe()
    assert lost.name == "GPU 2 (not answering)" and lost.unavailable == ("handle",)
    assert lost.memory_free_bytes is None and lost.supports_bf16 is None


def test_readiness_needs_every_gpu_bf16_capable() -> None:
    hw = inventory(fake_nvml())
    assert not hw.bf16_ready  # the T4 (sm 7.5) and the lost GPU hold it back
    only_a100 = HardwareInfo(gpus=hw.gpus[:1], cuda_driver_version=hw.cuda_driver_version)
    assert only_a100.bf16_ready


def test_query_hardware_initialises_and_always_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(calls=calls))
    hw = query_hardware()
    assert len(hw.gpus) == 3 and calls == ["init", "shutdown"]


def test_driver_not_loaded_is_said_once_and_the_rest_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = fake_nvml()

    def init() -> None:
        raise _error("DriverNotLoaded")

    broken.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    hw = query_hardware()
    assert hw.gpus == () and hw.nvml_error == "NVML unavailable: Driver Not Loaded"
    assert hw.cpu_count >= 1 and hw.ram_total_bytes > 0
    assert hw.describe().startswith("no NVIDIA GPU (NVML unavailable: Driver Not Loaded)")


def _real_hardware() -> HardwareInfo:
    saved = os.environ.pop("WORKBENCH_FAKE_NO_GPU", None)
    try:
        return query_hardware()
    finally:
        if saved is not None:
            os.environ["WORKBENCH_FAKE_NO_GPU"] = saved


THIS_MACHINE = _real_hardware()


@pytest.mark.gpu
@pytest.mark.skipif(not THIS_MACHINE.gpus, reason=f"needs an NVIDIA GPU; this machine has none "
                                                  f"({THIS_MACHINE.nvml_error}); the no-GPU case is the next test")
def test_this_gpu_machine_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real NVML path on a GPU machine: the real answers parse, every GPU has its memory."""
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    hw = query_hardware()
    assert hw.nvml_error is None and hw.gpus and all(g.memory_total_bytes for g in hw.gpus)
    assert hw.cuda_driver_version is not None and pick_gpus(hw, 1)


@pytest.mark.skipif(bool(THIS_MACHINE.gpus), reason="this machine has an NVIDIA GPU; the no-GPU case needs one "
                                                    "without (test_this_gpu_machine_for_real covers this one)")
def test_this_machine_without_a_gpu_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real NVML path: on a machine without an NVIDIA driver it says so and goes on."""
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    hw = query_hardware()
    assert hw.nvml_error and "NVML" in hw.nvml_error
    assert not hw.has_cuda and not hw.bf16_ready
    with pytest.raises(ValueError, match="this machine has 0"):
        pick_gpus(hw, 1)


def test_fake_no_gpu_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_FAKE_NO_GPU", "1")
    assert query_hardware().nvml_error == "disabled by WORKBENCH_FAKE_NO_GPU"


def _box(*free_gib: float | None) -> HardwareInfo:
    gpus = tuple(GpuInfo(index=i, name="GPU", memory_total_bytes=80 * GIB,
                         memory_used_bytes=None if free is None else int((80 - free) * GIB))
                 for i, free in enumerate(free_gib))
    return HardwareInfo(gpus=gpus)


def test_pick_gpus_takes_the_most_free_memory() -> None:
    box = _box(10, 70, None, 70, 40)
    assert pick_gpus(box, 1) == [1]  # tie between 1 and 3: the lower index
    assert pick_gpus(box, 2) == [1, 3]
    assert pick_gpus(box, 3) == [1, 3, 4]
    assert pick_gpus(box, 5) == [0, 1, 2, 3, 4]  # unknown free memory comes last, but is taken when needed
    assert pick_gpus(inventory(fake_nvml()), 1) == [0]  # 68 GiB free on the busy A100 beat 15 on the idle T4


def test_pick_gpus_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        pick_gpus(_box(10), 0)
    with pytest.raises(ValueError, match="asked for 3 GPUs, this machine has 2"):
        pick_gpus(_box(10, 20), 3)


def test_visible_devices_follow_nvml_numbering() -> None:
    assert visible_devices_env([1, 3]) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,3"}
