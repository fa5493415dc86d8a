"""Issue #29, Medium 13: `validate` holds a profile to the machine it runs on. `strategy = "ddp"`,
`nproc_per_node = 1024` and `gpu_ids = [-1, 99999]` passed on a 2-CPU, 24 GiB machine (the forecast said
3,072 GiB of host RAM, with no verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.hardware.machine import HardwareInfo
from backend.launch.validate import errors, validate
from backend.profile import LaunchProfile, load_profile
from tests.fakes import CPU_BOX, GIB


def _quickstart(**distribution: object) -> LaunchProfile:
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    for key, value in distribution.items():
        setattr(profile.distribution, key, value)
    return profile


def _errors(profile: LaunchProfile, hardware: HardwareInfo = CPU_BOX) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for problem in errors(validate(profile, hardware, base_dir=SHIPPED_PROFILES_DIR)):
        found.setdefault(problem.field, []).append(problem.message)
    return found


def test_more_cpu_processes_than_cores_is_an_error() -> None:
    found = _errors(_quickstart(strategy="ddp", nproc_per_node=1024))
    assert found["distribution.nproc_per_node"][0] == (
        "1024 processes per machine on 2 CPU cores: each process loads the model and trains on its own core "
        "(and its own share of RAM).")


def test_the_host_ram_forecast_beyond_the_machines_is_an_error(tiny_model: Path) -> None:
    small = HardwareInfo(nvml_error="test", cpu_count=64, ram_total_bytes=4 * GIB)
    found = _errors(_quickstart(strategy="ddp", nproc_per_node=16), small)
    (message,) = found["distribution.nproc_per_node"]
    assert message.startswith("the forecast needs about ") and message.endswith(
        " GiB of host RAM on this machine (16 process(es)); it has 4.0 GiB.")


@pytest.mark.parametrize("ids, message", [
    ([-1, 99999], "GPU ids [-1] are negative; ids count from 0."),
    ([0, 1], "GPU ids [0, 1] do not exist: this machine has no NVIDIA GPU."),
])
def test_gpu_ids_that_do_not_exist_are_an_error(ids: list[int], message: str) -> None:
    assert _errors(_quickstart(gpu_ids=ids))["distribution.gpu_ids"] == [message]


def test_two_cpu_processes_on_two_cores_stay_clean() -> None:
    assert _errors(load_profile(SHIPPED_PROFILES_DIR / "cpu-ddp-2proc.toml")) == {}
