"""One GPU choice (#33 item 6): the queue's admission, a launch's `pick_gpus` and golden prompts beside a training
choose GPUs by one rule, nvitop's own `select_devices`, asked over readings of free memory (the keeper's recorded
ones here: no NVML is opened)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from backend.hardware.gpu_choice import choose_gpus
from backend.hardware.machine import GpuInfo, HardwareInfo, pick_gpus
from backend.queue import admission

GIB = 1024**3


def _box(free: dict[int, int | None]) -> HardwareInfo:
    return HardwareInfo(
        gpus=tuple(
            GpuInfo(
                index=i, name="GPU", memory_total_bytes=80 * GIB, memory_used_bytes=None if f is None else 80 * GIB - f
            )
            for i, f in free.items()
        )
    )


def test_a_tie_goes_as_nvitop_chooses_in_the_queue_and_at_launch() -> None:
    free = {0: 40 * GIB, 1: 40 * GIB, 2: 10 * GIB}
    # nvitop's select_devices keeps GPU 0 free at a tie: the higher index goes first
    assert admission.pick_gpus(free, set(), "auto", 1, None, 0.0) == ([1], None)
    assert pick_gpus(_box(free), 1) == [1]
    assert admission.pick_gpus(free, set(), "auto", 2, None, 0.0) == ([0, 1], None)
    assert admission.pick_gpus(free, {1}, "auto", 1, None, 0.0) == ([0], None)


def test_unknown_free_memory_comes_last_and_never_meets_a_minimum() -> None:
    free = {0: None, 1: 5 * GIB, 2: 6 * GIB}
    assert admission.pick_gpus(free, set(), "auto", 2, None, 0.0) == ([1, 2], None)
    assert admission.pick_gpus(free, set(), "auto", 3, None, 0.0) == ([0, 1, 2], None)
    assert choose_gpus(free, 1, 6 * GIB) == [2]
    assert choose_gpus(free, 2, 7 * GIB) == []


def test_every_choice_asks_nvitops_select_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[list[int], dict[str, Any]]] = []

    def select_devices(devices: list[Any], **criteria: Any) -> list[int]:
        asked.append(([d.index for d in devices], criteria))
        return [3]

    monkeypatch.setitem(sys.modules, "nvitop", types.SimpleNamespace(select_devices=select_devices))
    free = {2: 30 * GIB, 3: 20 * GIB}
    assert admission.pick_gpus(free, set(), "auto", 1, 10 * GIB, 0.1) == ([3], None)
    assert pick_gpus(_box(free), 1) == [3]
    assert asked == [([2, 3], {"format": "index", "force_index": True, "max_count": 1, "min_free_memory": None})] * 2
