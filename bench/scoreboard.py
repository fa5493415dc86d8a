"""The checkpoint scoreboard of a run with 100 checkpoints: read and drawn, timed (target < 100 ms).

    .venv/bin/python bench/scoreboard.py [--checkpoints 100] [--steps-per-checkpoint 100] [--repeat 5]

A hand-made run folder in a temporary folder: events.jsonl written with backend.contract.events' writer (a Log
per step, an Eval and a Checkpoint per save: 10,000 steps by default) and 100 fake LoRA checkpoint
folders (the files swift writes, small). Timed, best of --repeat:

- read, cold: `scoreboard(run)` in a fresh process's state, the backend's rows from the run folder alone
  (what `workbench checkpoints`, merge/chat/infer's choice and the monitor's first draw each do);
- read, warm: again in the same process (the monitor's redraws: only appended lines are read, complete
  checkpoints are not judged again);
- text: `text_lines(board)`, the table `workbench checkpoints RUN` prints;
- panel, full: the monitor's ScoreboardPanel filled with all those rows and every line of it rendered
  (160x48 screen, headless Textual app; the UI thread's share: the read happens in a worker);
- panel, unchanged: the same board again (a redraw of a run where nothing changed).

Exit status 1 when cold read + full panel draw is over the target.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.checkpoints import saved_events as scoreboard_events
from backend.checkpoints import stats as checkpoint_stats  # noqa: E402
from backend.checkpoints.board_text import text_lines  # noqa: E402
from backend.checkpoints.scoreboard import scoreboard  # noqa: E402
from backend.contract.event_writer import EventWriter  # noqa: E402
from backend.rundir.layout import RunFolder  # noqa: E402

TARGET_SECONDS = 0.100
FILES = {"adapter_model.safetensors": 4096, "adapter_config.json": 600, "args.json": 9000, "optimizer.pt": 8192,
         "scheduler.pt": 1200, "rng_state.pth": 14_000, "trainer_state.json": 3000, "training_args.bin": 7000,
         "README.md": 5000, "additional_config.json": 50}


def make_run(parent: Path, checkpoints: int, every: int) -> RunFolder:
    run = RunFolder.create(parent, "20261201-120000-bench-0001")
    writer = EventWriter(run.events_path)
    for step in range(1, checkpoints * every + 1):
        writer.write("log", step=step, loss=2.0 / (1 + step / 500) + 0.01 * (step % 7))
        if step % every == 0:
            writer.write("eval", step=step, metrics={"eval_loss": 1.5 + ((step / every) - 60) ** 2 / 5000})
            writer.write("checkpoint", step=step, path=f"output/checkpoint-{step}")
            folder = run.path / "output" / f"checkpoint-{step}"
            folder.mkdir(parents=True)
            for name, size in FILES.items():
                (folder / name).write_bytes(b"\0" * size)
    writer.close()
    return run


def best_of(repeat: int, work) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def cold_read(run: RunFolder):  # type: ignore[no-untyped-def]
    scoreboard_events.clear_cache()
    checkpoint_stats.clear_cache()
    return scoreboard(run)


async def panel_seconds(run: RunFolder, board, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(full draw, redraw of an unchanged board): the UI thread's work, timed directly: the panel takes the
    board, then every line of it and its children is rendered (what the compositor asks for a frame)."""
    from textual.app import App, ComposeResult
    from textual.geometry import Region
    from textual.widget import Widget

    from tui.widgets.scoreboard import ScoreboardPanel, ScoreRows

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield ScoreboardPanel(run.path, id="scoreboard", classes="-shown")

    def draw(widget: Widget) -> int:
        lines = len(widget.render_lines(Region(0, 0, *widget.outer_size)))
        return lines + sum(draw(child) for child in widget.children)

    full, same = [], []
    async with Bench().run_test(size=(160, 48)) as pilot:
        panel = pilot.app.query_one(ScoreboardPanel)
        await pilot.pause()
        for _ in range(repeat):
            panel.query_one(ScoreRows).lines = []  # forget what is drawn: every row is laid out again
            panel.board = None  # else an equal board is not drawn again
            started = time.perf_counter()
            panel._loaded(ScoreboardPanel.Loaded(board))
            draw(panel)
            full.append(time.perf_counter() - started)
            await pilot.pause()
            started = time.perf_counter()
            panel._loaded(ScoreboardPanel.Loaded(board))
            draw(panel)
            same.append(time.perf_counter() - started)  # an equal board: compared, not drawn
            await pilot.pause()
        assert panel.loads >= 2 * repeat
    return min(full), min(same)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--steps-per-checkpoint", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), args.checkpoints, args.steps_per_checkpoint)
        size = run.events_path.stat().st_size
        cold, board = best_of(args.repeat, lambda: cold_read(run))
        warm, _ = best_of(args.repeat, lambda: scoreboard(run))
        text, lines = best_of(args.repeat, lambda: text_lines(board))  # type: ignore[arg-type]
        full, same = asyncio.run(panel_seconds(run, board, args.repeat))
    print(f"{args.checkpoints} checkpoints, {args.checkpoints * args.steps_per_checkpoint:,} steps, "
          f"events.jsonl {size / 2**20:.1f} MiB; best: {board.best.name if board.best else None}")  # type: ignore[attr-defined]
    print(f"read, cold:           {cold * 1000:6.1f} ms")
    print(f"read, warm:           {warm * 1000:6.1f} ms")
    print(f"text (the CLI table): {text * 1000:6.1f} ms  ({len(lines)} lines)")  # type: ignore[arg-type]
    print(f"panel, full draw:     {full * 1000:6.1f} ms")
    print(f"panel, unchanged:     {same * 1000:6.1f} ms")
    total = cold + full
    print(f"cold read + full draw:{total * 1000:6.1f} ms  (target < {TARGET_SECONDS * 1000:.0f} ms): "
          f"{'ok' if total < TARGET_SECONDS else 'OVER'}; best of {args.repeat}")
    return 0 if total < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
