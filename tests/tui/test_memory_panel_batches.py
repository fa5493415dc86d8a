"""#37: the monitor's memory panel says when the longest batch lands (forecast at launch), the peak the steps
measured and whether it was the batch, and memory creeping at equal length (step_time events reach it through
the store). Expected lines written by hand."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from run_fixtures import fixture_run, open_monitor, wait_for

from backend.contract.event_writer import EventWriter
from tui.app import WorkbenchApp

MIB = 2**20
GIB = 2**30


def plain(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _steps(writer: EventWriter, tokens: list[int], memory: list[int]) -> None:
    for start in range(0, len(tokens), 10):
        writer.write("step_time", first_step=start + 1, last_step=start + 10, step_tokens=tokens[start:start + 10],
                     step_memory=memory[start:start + 10], memory_kind="host_peak_rss", memory_limit=16 * GIB)


async def _memory_lines(tmp_path: Path, tokens: list[int], memory: list[int], forecast: dict) -> list[str]:
    run = fixture_run(tmp_path, "quickstart-short")
    run.forecast_path.write_text(json.dumps(forecast))
    writer = EventWriter(run.events_path)
    _steps(writer, tokens, memory)
    writer.close()
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        await wait_for(pilot, lambda: "peak " in plain(screen.query_one("#memory").content), what="the peak line")
        return [line.strip() for line in plain(screen.query_one("#memory").content).splitlines()]


async def test_the_longest_batch_forecast_and_its_measured_peak(tmp_path: Path, isolated_runs: Path) -> None:
    tokens, memory = [100] * 40, [600 * MIB] * 40
    tokens[5], memory[5] = 1000, 900 * MIB  # step 6: the long row
    line = "longest batch at step 6 of 40: 1,000 tokens, peak 900.0 MiB of 16.0 GiB host RAM"
    lines = await _memory_lines(tmp_path, tokens, memory, {"longest_batch": {"step": 6, "line": line}})
    assert f"forecast: {line}" in lines
    assert "peak 900.0 MiB at step 6: the longest batch (1,000 tokens), not creep" in lines
    assert not any("per 1,000 steps" in text for text in lines)


async def test_memory_creeping_at_equal_length_is_said_with_its_rate(tmp_path: Path, isolated_runs: Path) -> None:
    # 512 MiB + 8 MiB a step at equal length: 8,000 MiB (7.8 GiB) per 1,000 steps; 16 GiB is reached
    # (16,384 - 832) / 8 = 1,944 steps after step 40
    lines = await _memory_lines(tmp_path, [100] * 40, [(512 + 8 * step) * MIB for step in range(1, 41)], {})
    assert "+7.8 GiB per 1,000 steps at equal length: OOM expected near step 1,984 (host RSS)" in lines
    assert "peak 832.0 MiB at step 40 (100 tokens)" in lines
