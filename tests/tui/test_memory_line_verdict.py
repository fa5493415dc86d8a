"""The memory line gives the planner's own verdict for the profile's GPUs (#26).

Before, it said "fits" anywhere up to 100 % of the GPU (the planner says "tight" above 90 %) and held the
forecast to the machine's smallest GPU, not to the GPUs the profile runs on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from textual.app import App, ComposeResult

from backend.core.units import gib
from backend.estimate.forecast import forecast_for_profile
from backend.hardware.machine import GpuInfo, HardwareInfo
from backend.profile import parse_profile
from tests.tui.conftest import until_shown
from tui.widgets.memory_line import ForecastQuery, MemoryLine

FIXTURE = Path(__file__).resolve().parents[1] / "estimate" / "fixtures" / "qwen2_5_7b"
GIB = 2**30


class LineApp(App):
    def compose(self) -> ComposeResult:
        yield MemoryLine(id="line")


async def test_the_line_says_tight_at_95_percent_of_the_profiles_gpu(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(FIXTURE / "config.json", model / "config.json")
    profile = parse_profile(f'[model]\nsource = "{model}"\n[precision]\nbf16 = true\n'
                            '[training]\nmax_length = 1024\n[distribution]\ngpu_ids = [0]\n')
    total = forecast_for_profile(profile, model, base_dir=tmp_path, gpu_memory_bytes=80 * GIB)["per_device_total_bytes"]
    # GPU 0 (the profile's) holds the forecast at 95 %; GPU 1, not the profile's, is far smaller
    hardware = HardwareInfo(gpus=(GpuInfo(index=0, name="big", memory_total_bytes=round(total / 0.95)),
                                  GpuInfo(index=1, name="small", memory_total_bytes=total // 2)),
                            cpu_count=8, ram_total_bytes=64 * GIB)
    app = LineApp()
    async with app.run_test(size=(160, 3)) as pilot:
        line = app.query_one(MemoryLine)
        line.question = ForecastQuery(profile, tmp_path, hardware)
        text = await until_shown(pilot, line, "GiB per GPU", timeout=60)
        assert f"tight in {gib(round(total / 0.95), 0)} GiB (95%)" in text
        assert "fits in" not in text and "does not fit" not in text
