"""Sizes and durations are written one way everywhere (backend.core.units), and one hub-id rule decides what is an id."""

from __future__ import annotations

from pathlib import Path

from backend.core.units import GIB, MIB, duration, gib, size
from backend.hardware.machine import HardwareInfo
from backend.models.refs import resolve_model_ref
from tui.screens.launch_support import hardware_line
from tui.widgets import units as tui_units

BIG_HOST = HardwareInfo(nvml_error="NVML unavailable: Driver Not Loaded", cpu_count=64, ram_total_bytes=1536 * GIB)


def test_sizes_and_durations() -> None:
    assert [size(None), size(512), size(3.5 * MIB), size(12 * GIB), size(5 * 1024 * GIB)] == [
        "n/a", "512 B", "3.5 MiB", "12.0 GiB", "5120.0 GiB"]
    assert [duration(None), duration(-3), duration(185), duration(3725)] == ["-", "0m00s", "3m05s", "1h02m"]
    assert [duration(45, short=True), duration(45), duration(2 * 86_400 + 3 * 3600 + 59)] == ["45s", "0m45s", "2d03h"]
    assert [gib(None), gib(12.34 * GIB), gib(1536 * GIB, 0), gib(0.5 * GIB, 2)] == ["N/A", "12.3", "1,536", "0.50"]
    assert tui_units.size is size and tui_units.duration is duration  # the monitor's figures: the same formatter


def test_a_big_hosts_ram_reads_the_same_in_the_cli_and_the_launch_screen() -> None:
    assert BIG_HOST.describe() == "no NVIDIA GPU (NVML unavailable: Driver Not Loaded); 64 CPU cores, 1,536 GiB RAM"
    assert hardware_line(BIG_HOST) == "no GPU · 64 CPUs · 1,536 GiB"


def test_a_reference_in_other_letters_is_not_taken_for_a_hub_id(tmp_path: Path) -> None:
    model = resolve_model_ref("Qwen/Qwen2.5-0.5B-Instruct", tmp_path)
    assert model.origin in ("hub", "hf-cache", "modelscope-cache") and model.hub_id == "Qwen/Qwen2.5-0.5B-Instruct"
    odd = resolve_model_ref("Qwen/Qwen2.5-modèle", tmp_path)  # neither hub accepts non-ASCII ids
    assert odd.hub_id is None
    assert odd.problem == "'Qwen/Qwen2.5-modèle' is neither a folder, builtin:NAME, run:ID nor a hub id Org/Name"
