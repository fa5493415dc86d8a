"""A stand-in for the `nvitop` package, answering from recorded readings (tests/nodes/fixtures/nvitop_readings.json).

It offers the part of nvitop's `Device` API the hardware adapter uses (and nvitop's own `select_devices`); "N/A" in the file is nvitop's own NA.
Install it with `monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop())`.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

from nvitop import NA, NaType, select_devices

READINGS = json.loads((Path(__file__).parent / "nodes" / "fixtures" / "nvitop_readings.json").read_text())


def _value(value: Any) -> Any:
    return NA if value == "N/A" else value


def _process(entry: dict[str, Any]) -> types.SimpleNamespace:
    gpu_memory = _value(entry["gpu_memory"])
    return types.SimpleNamespace(type=entry["type"], gpu_memory=lambda: gpu_memory)


def _processes(entries: list[dict[str, Any]], self_pid: int) -> dict[int, types.SimpleNamespace]:
    return {self_pid if e["pid"] == "SELF" else e["pid"]: _process(e) for e in entries}


class _Slice:
    def __init__(self, reading: dict[str, Any], self_pid: int):
        self.reading, self.self_pid = reading, self_pid

    def processes(self) -> dict[int, types.SimpleNamespace]:
        return _processes(self.reading["processes"], self.self_pid)


def fake_nvitop(machine: dict[str, Any] = READINGS, init_error: Exception | None = None,
                self_pid: int | None = None) -> types.ModuleType:
    """A module named nvitop whose Device answers from `machine`; `init_error` is what NVML's start raises;
    the process "SELF" of the readings is `self_pid` (default: this test process)."""
    self_pid = os.getpid() if self_pid is None else self_pid

    class Device:
        def __init__(self, index: int):
            self.reading = machine["devices"][index]
            self.handle = None if self.reading.get("lost") else object()

        @staticmethod
        def count() -> int:
            if init_error is not None:
                raise init_error
            return len(machine["devices"])

        @staticmethod
        def driver_version() -> str:
            return machine["driver_version"]

        @staticmethod
        def cuda_driver_version() -> str:
            return machine["cuda_driver_version"]

        def name(self) -> str:
            return self.reading["name"]

        def memory_info(self) -> types.SimpleNamespace:
            return types.SimpleNamespace(**{k: _value(v) for k, v in self.reading["memory"].items()})

        def utilization_rates(self) -> types.SimpleNamespace:
            return types.SimpleNamespace(**{k: _value(v) for k, v in self.reading["utilization"].items()})

        def cuda_compute_capability(self) -> tuple[int, int] | NaType:
            return tuple(self.reading["compute_capability"])  # type: ignore[return-value]

        def uuid(self) -> str:
            return _value(self.reading["uuid"])

        def bus_id(self) -> str:
            return _value(self.reading["bus_id"])

        def is_mig_mode_enabled(self) -> bool:
            return "mig_slices" in self.reading

        def mig_devices(self) -> list[_Slice]:
            return [_Slice(s, self_pid) for s in self.reading.get("mig_slices", [])]

        def processes(self) -> dict[int, types.SimpleNamespace]:
            return _processes(self.reading["processes"], self_pid)

    module = types.ModuleType("nvitop")
    module.Device = Device  # type: ignore[attr-defined]
    module.NA = NA  # type: ignore[attr-defined]
    module.NaType = NaType  # type: ignore[attr-defined]
    module.select_devices = select_devices  # type: ignore[attr-defined]  # nvitop's own: it reads no NVML itself
    return module
