"""Monitor bench: a 1,000,000-event run folder, then a live writer at 200 events/s.

    .venv/bin/python bench/monitor_bench.py [--events 1000000] [--rate 200] [--live-seconds 15]

Prints
- ingest: reading the whole events file into the metrics store (reader + store); the run's
  events summary as its supervisor keeps it (backend/series/summary.py; the bench leaves it 8 MiB
  behind the end, the most it lags); the monitor screen opening that run folder until it has read
  it all and drawn it once, with the summary (goal < 1 s) and without one (a run imported or made
  before summaries: the whole file is read; the screen shows "reading N %" meanwhile);
- frame: per update during the live phase, the monitor's handler plus the compositor's
  render of the screen (plots included), median / p95 / max (goal < 50 ms);
- RSS of this process (the TUI) before, after the 1M events and during the live phase
  (goal: bounded: it does not grow with the events read).
The TUI runs headless at 160x48 in this process; the writer is a separate process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WRITER = """
import math, random, sys, time
from backend.contract.event_writer import EventWriter
path, start, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
writer = EventWriter(path)
print("ready", flush=True)
sys.stdin.readline()
began, n = time.monotonic(), 0
while time.monotonic() - began < seconds:
    n += 1
    step = start + n
    writer.write("log", step=step, max_steps=start + 10**7, epoch=step / 1000, loss=2 + math.exp(-step / 2e5) + random.random() * 0.3,
                 learning_rate=3e-4, grad_norm=1 + random.random(), token_acc=0.5, steps_per_second=rate,
                 tokens_per_second=rate * 500, rss_bytes=600_000_000, loss_scale=65536.0, overflow_count=0,
                 skipped_steps=0)
    time.sleep(max(0.0, began + n / rate - time.monotonic()))
print(n, flush=True)
"""


def mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def spread(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return (f"median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
            f"max {ordered[-1] * 1000:.1f} ms")


def rss() -> int:
    return psutil.Process().memory_info().rss


def write_synthetic(path: Path, count: int, seed: int = 0) -> None:
    """`count` events like the plugin writes (run_begin, logs, an eval every 1000 steps), written fast."""
    rnd = random.Random(seed)
    t0, scale, overflows = 1.7e9, 65536.0, 0
    with open(path, "w") as out:
        out.write(json.dumps({"v": 1, "type": "run_begin", "time": t0, "rank": 0, "precision": "fp16",
                              "scaler": "GradScaler", "scaler_reason": "fp16 needs dynamic loss scaling",
                              "max_steps": count}) + "\n")
        lines = []
        for step in range(1, count):
            if rnd.random() < 0.0005:
                scale, overflows = scale / 2, overflows + 1
            elif step % 2000 == 0:
                scale *= 2
            loss = 2 + 5 * math.exp(-step / 1e5) + rnd.random() * 0.3
            lines.append(
                f'{{"v":1,"type":"log","time":{t0 + step * 0.1},"rank":0,"step":{step},"max_steps":{count},'
                f'"epoch":{step / 1000},"loss":{loss},"learning_rate":{3e-4 * (1 - step / count)},'
                f'"grad_norm":{1 + rnd.random()},"token_acc":0.5,"steps_per_second":10.0,'
                f'"tokens_per_second":5000.0,"rss_bytes":600000000,"loss_scale":{scale},'
                f'"overflow_count":{overflows},"skipped_steps":{overflows}}}\n')
            if step % 1000 == 0:
                lines.append(f'{{"v":1,"type":"eval","time":{t0 + step * 0.1},"rank":0,"step":{step},'
                             f'"metrics":{{"eval_loss":{loss + 0.1}}}}}\n')
            if len(lines) >= 50_000:
                out.writelines(lines)
                lines.clear()
        out.writelines(lines)


def make_run_folder(root: Path, events: int, supervisor_pid: int, name: str = "bench-run") -> Path:
    from backend.rundir.layout import RunFolder, RunState

    run = RunFolder(root / name)
    run.path.mkdir(parents=True, exist_ok=True)  # the writer may have made it already
    write_synthetic(run.events_path, events)
    run.log_path.write_text("bench: synthetic run\n")
    now = time.time()
    # the writer process stands in for the supervisor: alive, so the run reads as running
    run.write_state(RunState(run_id=run.run_id, profile_name="bench", status="running", supervisor_pid=supervisor_pid,
                             created_at=now - 3600, started_at=now - 3600))
    return run.path


def bench_store(events_path: Path) -> float:
    """The store's own ingest (reader + store), and the parsing floor under it; returns the ingest's CPU s."""
    import msgspec

    from backend.series import CHUNK_BYTES, load_store

    before, wall, cpu = rss(), time.perf_counter(), time.process_time()
    store = load_store(events_path)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    size = events_path.stat().st_size
    print(f"store ingest: {store.log_events:,} log events ({size / 2**20:.0f} MiB) in {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU; decoder: {'msgspec' if msgspec else 'stdlib json'}; "
          f"RSS +{mib(rss() - before)} while holding the store")
    del store
    if msgspec is not None:  # what no store can go under: reading the file and parsing each line once

        class Kind(msgspec.Struct):
            type: str = ""

        decoder, floor = msgspec.json.Decoder(Kind), time.process_time()
        with open(events_path, "rb") as handle:
            while (block := handle.read(CHUNK_BYTES)) and (end := block.rfind(b"\n") + 1):
                handle.seek(end - len(block), os.SEEK_CUR)  # the next read starts at the cut line
                decoder.decode_lines(block[:end])
        floor = time.process_time() - floor
        print(f"  floor: reading the file + parsing every line (msgspec, its type only): {floor:.2f} s CPU "
              f"({cpu / floor:.2f}x for the store)")
    return cpu


def summarise_all_but_the_last(events_path: Path, lag_bytes: int) -> None:
    """The run's events summary as its supervisor leaves it at worst: `lag_bytes` before the file's end
    (the keeper saves every SAVE_EVERY_BYTES). Prints the keeper's cost: the supervisor's, over the run."""
    from backend.series.summary import SummaryKeeper, summary_path

    size = events_path.stat().st_size
    with open(events_path, "r+b") as handle:  # cut the last lines off, summarise, put them back (same file)
        handle.seek(size - lag_bytes)
        handle.readline()
        cut = handle.tell()
        rest = handle.read()
        handle.truncate(cut)
    wall, cpu = time.perf_counter(), time.process_time()
    SummaryKeeper(events_path).catch_up(final=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    with open(events_path, "ab") as handle:
        handle.write(rest)
    print(f"summary (kept by the run's supervisor, here all at once): {cpu:.2f} s CPU for {cut / 2**20:.0f} MiB "
          f"of events ({wall:.2f} s wall), saved {summary_path(events_path).stat().st_size / 1024:.0f} KiB; "
          f"the monitor reads the last {(size - cut) / 2**20:.1f} MiB after it")


async def open_monitor(app, run_dir: Path, label: str, store_cpu: float | None):  # type: ignore[no-untyped-def]
    """Push a monitor of run_dir; wait until it has read everything and drawn it; print what it cost."""
    from tui.screens.monitor import MonitorScreen
    from tui.widgets.metric_plots import MetricPlot

    screen = MonitorScreen(run_dir)
    opened, opened_cpu = time.perf_counter(), time.process_time()
    await app.push_screen(screen)
    while screen.redraws == 0 or screen.feed.has_backlog() or screen.feed.state is None:
        await asyncio.sleep(0.01)
    while not all(plot.up_to_date for plot in screen.query(MetricPlot)):
        await asyncio.sleep(0.01)
    caught_up, caught_up_cpu = time.perf_counter() - opened, time.process_time() - opened_cpu
    draws = screen.redraws
    ratio = f"; {caught_up_cpu / store_cpu:.2f}x the store's own ingest" if store_cpu else ""
    print(f"monitor open, {label}: {screen.feed.store.log_events:,} events read and drawn in {caught_up:.2f} s wall "
          f"({draws} draw{'s' if draws != 1 else ''} of the panels, plots built), {caught_up_cpu:.2f} s CPU of "
          f"all threads (goal < 1 s{ratio}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"started from: {screen.feed.start})")
    return screen


async def bench_monitor(run_dir: Path, writer: subprocess.Popen[str], rate: float, seconds: float,
                        store_cpu: float) -> None:
    from backend.series.summary import SAVE_EVERY_BYTES, summary_path
    from tui.app import WorkbenchApp

    events_path = run_dir / "events.jsonl"
    summarise_all_but_the_last(events_path, SAVE_EVERY_BYTES)
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        rss_before = rss()
        # first (so it also pays the screen's one-time imports): a run of the workbench, with its summary
        await open_monitor(app, run_dir, "with the supervisor's summary", None)
        await pilot.pause(0.3)
        print(f"RSS: {mib(rss_before)} before opening, {mib(rss())} after 1M events (from the summary)")
        app.pop_screen()
        # then a run without one (imported, or made before summaries): the whole file is read
        summary_path(events_path).unlink()
        screen = await open_monitor(app, run_dir, "no summary (the whole file read)", store_cpu)
        # every frame the UI thread draws from now on: the compositor's render, plus the update handler before it
        frames: list[float] = []  # wall seconds
        frames_cpu: list[float] = []  # CPU seconds of the UI thread (what other processes cannot inflate)
        original_refresh, seen = screen._compositor_refresh, [screen.redraws]

        def timed_refresh() -> None:
            started, cpu = time.perf_counter(), time.thread_time()
            original_refresh()
            wall, used = time.perf_counter() - started, time.thread_time() - cpu
            if screen.redraws != seen[0]:
                seen[0] = screen.redraws
                wall, used = wall + screen.redraw_seconds, used + screen.redraw_cpu_seconds
            frames.append(wall)
            frames_cpu.append(used)

        screen._compositor_refresh = timed_refresh  # type: ignore[method-assign]
        await pilot.pause(0.3)
        rss_loaded = rss()
        print(f"RSS: {mib(rss_loaded)} after the whole file read")

        frames.clear()
        frames_cpu.clear()
        samples, lags = [], []
        writer.stdin.write("go\n")
        writer.stdin.flush()
        began, began_at = time.monotonic(), time.time()
        while time.monotonic() - began < seconds:
            await asyncio.sleep(0.25)
            samples.append(rss())
            last = screen.feed.store.last_log  # a typed Log event (backend/contract/events.py), or None
            stamp = last.time if last is not None else None
            if isinstance(stamp, float) and stamp >= began_at:  # the writer's, not the backlog's
                lags.append(time.time() - stamp)
        written = int(writer.stdout.readline() or 0)
        await pilot.pause(1.0)
        got = screen.feed.store.log_events
        print(f"live: {written} events written at {rate:g}/s for {seconds:g} s; the monitor has {got:,} events; "
              f"{len(frames)} frames")
        print(f"frame (handler + render, 160x48): {spread(frames)} wall; {spread(frames_cpu)} UI-thread CPU "
              f"(goal < 50 ms; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        if lags:
            print(f"display lag (event time -> on screen): median {statistics.median(lags):.2f} s, "
                  f"max {max(lags):.2f} s")
        print(f"RSS during live: min {mib(min(samples))}, max {mib(max(samples))}, "
              f"growth {mib(max(samples) - rss_loaded)} over {seconds:g} s (bounded: store and log tail are fixed-size)")

        # an ended run (no supervisor to keep a summary) read whole once has one from that read
        app.pop_screen()
        if summary_path(events_path).exists():
            await open_monitor(app, run_dir, "again, from the summary its whole read left", None)
            app.pop_screen()
        else:
            print("monitor open again: no summary was left (the run reads as active: its supervisor keeps one)")
        # the screen's own cost, without a backlog: the same monitor on a 1,000-event run, opened after
        # the first (one-time imports and style parsing are not in it)
        await open_monitor(app, make_run_folder(run_dir.parent, 1000, writer.pid, "small-run"),
                           "a 1,000-event run (the screen's own cost, for scale)", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--live-seconds", type=float, default=15.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="monitor-bench-") as tmp:
        root = Path(tmp)
        os.environ.update(WORKBENCH_DATA_DIR=str(root / "data"), WORKBENCH_WORKSPACE=str(root / "runs"),
                          WORKBENCH_CACHE_DIR=str(root / "cache"))
        events_path = root / "runs" / "bench-run" / "events.jsonl"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(events_path), str(args.events), str(args.rate),
                                   str(args.live_seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=REPO)
        try:
            made = time.perf_counter()
            run_dir = make_run_folder(root / "runs", args.events, writer.pid)
            print(f"synthetic events file: {args.events:,} events, {events_path.stat().st_size / 2**20:.0f} MiB "
                  f"(written in {time.perf_counter() - made:.1f} s, not counted)")
            assert writer.stdout.readline().strip() == "ready"
            store_cpu = bench_store(events_path)
            asyncio.run(bench_monitor(run_dir, writer, args.rate, args.live_seconds, store_cpu))
        finally:
            writer.kill()
            writer.wait()


if __name__ == "__main__":
    main()
