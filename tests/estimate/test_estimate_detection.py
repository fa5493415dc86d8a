"""`workbench estimate` without --gpu-memory / --host-memory: the sizes come from NVML (nvitop) and psutil. Both are
faked here with recorded answers (tests/nodes/fixtures/nvitop_readings.json: an A100 80 GiB, a T4 15 GiB and a
lost GPU), so the GPU path runs on a machine without one; the expected numbers are written by hand."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import typer
from estimate_helpers import FIXTURES
from typer.testing import CliRunner

from backend.cli.estimate import register
from backend.hardware.machine import detect_hardware
from tests.nvitop_fake import fake_nvitop

GIB = 2**30


@pytest.fixture
def estimate_json(tmp_path: Path) -> Iterator[object]:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """workbench"""

    model = tmp_path / "Qwen2.5-7B"
    model.mkdir()
    shutil.copy(FIXTURES / "qwen2_5_7b" / "config.json", model / "config.json")

    def run() -> dict:
        result = CliRunner().invoke(app, ["estimate", "--model", str(model), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    detect_hardware.cache_clear()  # asked once per process: each test asks its own fake
    yield run
    detect_hardware.cache_clear()


@pytest.fixture
def host_with_512_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(total=512 * GIB))


def test_gpu_memory_is_the_smallest_detected_gpu_and_host_memory_is_psutils(
        estimate_json, host_with_512_gib: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop())
    request = estimate_json()["request"]
    assert request["gpu_memory_bytes"] == 15 * GIB  # the T4, not the A100 (80 GiB); the lost GPU has none
    assert request["host_memory_bytes"] == 512 * GIB


def test_without_nvml_there_is_no_gpu_size_and_host_memory_still_comes(
        estimate_json, host_with_512_gib: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(init_error=OSError("NVML Shared Library Not Found")))
    request = estimate_json()["request"]
    assert request["gpu_memory_bytes"] is None
    assert request["host_memory_bytes"] == 512 * GIB
