"""Screen switches of the TUI: F3 (runs list) and F7 (queue) from the launch workspace, headless at 80x24.

For each switch: seconds from the key until the new screen is on screen (its frame drawn), and until its
worker's first read has filled it; the first switch (the screen's modules imported, the screen built) and
later ones (built already). The workspace holds --runs finished runs and a queue of --queued entries.

    .venv/bin/python bench/screen_switch_bench.py [--runs 20] [--queued 5] [--repeats 3] [--json]

Goal (#41): a switch draws its frame at once and fills in from workers; "loading…" until the first read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _workspace(root: Path, runs: int, queued: int) -> None:
    os.environ.update({"WORKBENCH_DATA_DIR": str(root / "data"), "WORKBENCH_WORKSPACE": str(root / "runs"),
                       "WORKBENCH_CONFIG_DIR": str(root / "config")})
    import shutil

    from backend.profile import LaunchProfile
    from backend.queue.add import add_profiles
    from backend.rundir.layout import RunFolder

    fixtures = REPO / "tests" / "fixtures" / "events"
    for number in range(runs):
        run = RunFolder.create(root / "runs", f"20261201-1200{number:02d}-bench-{number:04x}")
        shutil.copy(fixtures / "quickstart-short.jsonl", run.events_path)
        shutil.copy(fixtures / "quickstart-short.state.json", run.path / "state.json")
        shutil.copy(fixtures / "quickstart-short.toml", run.profile_path)
    add_profiles([(LaunchProfile(name=f"queued-{n}"), root) for n in range(queued)])


async def _switch(pilot, key: str, screen_type: type, back: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    await pilot.press(key)
    while not (isinstance(pilot.app.screen, screen_type) and pilot.app.screen.is_mounted):
        if time.perf_counter() - started > 120:
            raise TimeoutError(f"{key}: no {screen_type.__name__} after 120 s (on screen: {pilot.app.screen!r})")
        await asyncio.sleep(0.005)
    await pilot.pause()  # its frame
    drawn = time.perf_counter() - started
    while not pilot.app.screen.loads:
        if time.perf_counter() - started > 120:
            raise TimeoutError(f"{key}: {screen_type.__name__} not filled after 120 s")
        await asyncio.sleep(0.005)
    filled = time.perf_counter() - started
    await pilot.press(back)
    await pilot.pause()
    return drawn, filled


async def measure(repeats: int) -> dict[str, list[tuple[float, float]]]:
    from backend.cli.wiring import install
    from backend.core.paths import SHIPPED_PROFILES_DIR
    from tui.app import WorkbenchApp

    install()
    app = WorkbenchApp(SHIPPED_PROFILES_DIR / "quickstart.toml")
    found: dict[str, list[tuple[float, float]]] = {"F3 runs": [], "F7 queue": []}
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(3.0)  # the workspace's own workers start (swift's defaults, the forecast)
        from tui.screens.queue import QueueScreen
        from tui.screens.runs import RunsScreen

        for _ in range(repeats):  # F7 is the model picker in the workspace: the queue is opened from the runs list
            found["F3 runs"].append(await _switch(pilot, "f3", RunsScreen, back="f3"))
            found["F7 queue"].append(await _switch(pilot, "f7", QueueScreen, back="escape"))
            await pilot.press("f2")
            await pilot.pause()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--queued", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _workspace(Path(tmp), args.runs, args.queued)
        found = asyncio.run(measure(args.repeats))
    result = {name: {"first_drawn_s": round(times[0][0], 3), "first_filled_s": round(times[0][1], 3),
                     "later_drawn_median_s": round(statistics.median(t[0] for t in times[1:]) if times[1:] else 0, 3),
                     "later_filled_median_s": round(statistics.median(t[1] for t in times[1:]) if times[1:] else 0, 3)}
              for name, times in found.items()}
    result["load_average_1min"] = round(os.getloadavg()[0], 2)  # type: ignore[assignment]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, figures in result.items():
        print(f"{name}: {figures}")


if __name__ == "__main__":
    main()
