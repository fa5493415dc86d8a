"""GPU inventory: nvitop readings parsed N/A- and MIG-aware, GPU selection, and the real no-GPU path."""

from __future__ import annotations

import os
import sys
from typing import Any

import psutil
import pynvml
import pytest

from backend.hardware.machine import GpuInfo, HardwareInfo, pick_gpus, query_hardware, visible_devices_env
from tests.nvitop_fake import READINGS, fake_nvitop

GIB = 2**30


@pytest.fixture
def nvitop_answers(monkeypatch: pytest.MonkeyPatch):
    """query_hardware() over a fake nvitop answering from the recorded readings."""
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)

    def ask(machine: dict[str, Any] = READINGS, init_error: Exception | None = None) -> HardwareInfo:
        monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(machine, init_error))
        return query_hardware()

    return ask


def test_recorded_answers_are_parsed_field_by_field(nvitop_answers) -> None:
    hw = nvitop_answers()
    a100, t4, lost = hw.gpus
    assert (hw.cuda_driver_version, hw.driver_version, hw.nvml_error) == ((12, 4), "550.54.15", None)
    assert a100.name == "NVIDIA A100-SXM4-80GB" and a100.memory_total_bytes == 85899345920
    assert (a100.memory_used_bytes, a100.memory_free_bytes) == (12465471488, 72904327168)
    assert (a100.utilization_percent, a100.memory_utilization_percent) == (37, 12)
    assert a100.compute_capability == (8, 0) and a100.supports_bf16 is True
    assert a100.pci_bus_id == "00000000:07:00.0" and a100.uuid.startswith("GPU-5b9a")
    mine, other = a100.processes
    assert (mine.pid, mine.used_memory_bytes, mine.name) == (os.getpid(), 11811160064, psutil.Process().name())
    assert (other.used_memory_bytes, other.kind) == (None, "compute")  # nvitop's N/A
    assert a100.unavailable == () and a100.mig_slices == 0
    assert t4.name == "Tesla T4"
    assert t4.supports_bf16 is False and t4.compute_capability == (7, 5)


def test_not_supported_fields_become_none_and_are_named(nvitop_answers) -> None:
    _, t4, lost = nvitop_answers().gpus
    assert t4.utilization_percent is None and t4.memory_utilization_percent is None and t4.uuid is None
    assert set(t4.unavailable) == {"utilization", "uuid"}
    assert t4.memory_total_bytes == 16106127360  # the rest of the device is still there
    assert "util N/A" in t4.describe() and "no bf16" in t4.describe()
    assert lost.name == "GPU 2 (not answering)" and lost.unavailable == ("handle",)
    assert lost.memory_free_bytes is None and lost.supports_bf16 is None


def test_a_mig_gpu_tells_its_slices_and_the_memory_of_processes_per_slice(nvitop_answers) -> None:
    hw = nvitop_answers(READINGS["mig_machine"])
    (h100,) = hw.gpus
    assert (hw.cuda_driver_version, hw.driver_version) == ((12, 2), "535.104.05")
    assert h100.mig_slices == 2 and h100.utilization_percent is None and h100.unavailable == ("utilization",)
    assert [(p.pid, p.used_memory_bytes) for p in h100.processes] == [(os.getpid(), 10 * GIB)]  # from its slice
    assert h100.describe() == ("0: NVIDIA H100 80GB HBM3  20.0/79.6 GiB used, 59.6 free  util N/A  sm 9.0 bf16  "
                               "1 procs  MIG 2 slices")


def test_readiness_needs_every_gpu_bf16_capable(nvitop_answers) -> None:
    hw = nvitop_answers()
    assert not hw.bf16_ready  # the T4 (sm 7.5) and the lost GPU hold it back
    only_a100 = HardwareInfo(gpus=hw.gpus[:1], cuda_driver_version=hw.cuda_driver_version)
    assert only_a100.bf16_ready


def test_driver_not_loaded_is_said_once_and_the_rest_goes_on(nvitop_answers) -> None:
    error = pynvml.NVMLError_DriverNotLoaded(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    hw = nvitop_answers(init_error=error)
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
    assert pick_gpus(box, 1) == [3]  # tie between 1 and 3: nvitop's select_devices keeps the lower index free
    assert pick_gpus(box, 2) == [1, 3]
    assert pick_gpus(box, 3) == [1, 3, 4]
    assert pick_gpus(box, 5) == [0, 1, 2, 3, 4]  # unknown free memory comes last, but is taken when needed


def test_pick_gpus_takes_the_busy_gpu_with_more_free_memory(nvitop_answers) -> None:
    assert pick_gpus(nvitop_answers(), 1) == [0]  # 68 GiB free on the busy A100 beat 15 on the idle T4


def test_pick_gpus_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        pick_gpus(_box(10), 0)
    with pytest.raises(ValueError, match="asked for 3 GPUs, this machine has 2"):
        pick_gpus(_box(10, 20), 3)


def test_visible_devices_follow_nvml_numbering() -> None:
    assert visible_devices_env([1, 3]) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,3"}
