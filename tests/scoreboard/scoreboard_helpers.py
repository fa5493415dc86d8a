"""Hand-made run folders for the scoreboard tests: events written with backend.contract.events' writer, fake
checkpoint folders of known sizes (no training)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from backend.contract.event_writer import EventWriter
from backend.profile import LaunchProfile, save_profile
from backend.rundir.layout import RunFolder
from tests.tui.run_fixtures import open_monitor, wait_for
from tui.widgets.scoreboard import ScoreboardPanel

WEIGHTS_BYTES = 10_240  # + four 2-byte files, args.json (68 bytes), trainer_state.json ({"global_step": N}, 18 bytes
# for a one-digit step): 10,334 bytes = "10.1 KiB"


def fake_checkpoint(run: RunFolder, step: int, complete: bool = True, weights: int = WEIGHTS_BYTES) -> Path:
    folder = run.path / "output" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "args.json").write_text('{"model": "/models/base", "model_type": "qwen2", "template": "qwen"}')
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * weights)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):  # what a resume reads back (2 bytes each)
        (folder / name).write_bytes(b"\0\0")
    if complete:
        (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return folder


def fake_run(parent: Path, events: list[tuple[str, dict[str, Any]]], checkpoints: dict[int, bool],
             run_id: str = "20261201-120000-fake-0001", training: dict[str, Any] | None = None) -> RunFolder:
    """A run folder with these events (type, fields) and checkpoints (step -> complete)."""
    run = RunFolder.create(parent, run_id)
    run.write_state(run.new_state("fake").model_copy(update={"status": "finished"}))
    if training is not None:
        save_profile(LaunchProfile.model_validate({"name": "fake", "training": training}), run.profile_path)
    writer = EventWriter(run.events_path)
    for kind, fields in events:
        writer.write(kind, **fields)
    writer.close()
    for step, complete in checkpoints.items():
        fake_checkpoint(run, step, complete)
    return run


def log(step: int, loss: float | None) -> tuple[str, dict[str, Any]]:
    return "log", {"step": step, "loss": loss}


def evaluation(step: int, **metrics: float) -> tuple[str, dict[str, Any]]:
    return "eval", {"step": step, "metrics": metrics}


def saved(step: int) -> tuple[str, dict[str, Any]]:
    return "checkpoint", {"step": step, "path": f"output/checkpoint-{step}"}


async def open_scoreboard(pilot: Pilot, run_dir: Path) -> ScoreboardPanel:
    """The run's monitor opened and its scoreboard shown (key c), read once; the monitor is `board.screen`."""
    screen = await open_monitor(pilot, run_dir)
    await pilot.press("c")
    board = screen.query_one(ScoreboardPanel)
    await wait_for(pilot, lambda: board.loads >= 1, what="the scoreboard")
    return board
