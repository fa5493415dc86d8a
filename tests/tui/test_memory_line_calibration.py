"""The launch dialog's memory line says where its host figure came from (#37 item 2): this machine's finished
runs ("host baseline: 0.60 GiB measured over 3 runs"), or the textbook terms on a machine without any."""

from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import load_profile
from tests.estimate.test_calibration import copy_runs
from tests.fakes import CPU_BOX
from tests.tui.conftest import until_shown
from tui.widgets.memory_line import ForecastQuery, MemoryLine


class LineApp(App):
    def compose(self) -> ComposeResult:
        yield MemoryLine(id="line")


async def _line(tiny_model: Path) -> str:
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    app = LineApp()
    async with app.run_test(size=(200, 3)) as pilot:
        line = app.query_one(MemoryLine)
        line.question = ForecastQuery(profile, SHIPPED_PROFILES_DIR, CPU_BOX)
        return await until_shown(pilot, line, "Memory (CPU run)", timeout=60)


async def test_the_line_gives_the_calibrated_host_figure_and_its_evidence(
    isolated_runs: Path, tiny_model: Path
) -> None:
    assert "· textbook host terms" in await _line(tiny_model)
    assert "host RAM 3.0" in await _line(tiny_model)
    copy_runs(isolated_runs)
    text = await _line(tiny_model)
    # 0.60 GiB baseline + the tiny model's terms on the CPU (about 6 MiB): 0.61 GiB
    assert "Memory (CPU run): host RAM 0.61 GiB of 24 GiB" in text
    assert text.rstrip().endswith("· host baseline: 0.60 GiB measured over 3 runs")
