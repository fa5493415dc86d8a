"""Scrolling the model picker asks about one model at a time: the question of a model the highlight
left is stopped with its child, never left importing torch/transformers/PEFT beside the next one."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import OptionList

from tests.tui.conftest import oracle_children
from tui.modals.model_picker import ModelPickerScreen

pytestmark = pytest.mark.one_shot_oracle  # the subject is the oracle's own children (tests/warm_oracle.py)


class PickerApp(App[None]):
    def __init__(self, roots: list[Path]) -> None:
        super().__init__()
        self.roots = roots

    def on_mount(self) -> None:
        self.push_screen(ModelPickerScreen("", self.roots))


async def _until(pilot, condition, what: str, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
        await pilot.pause()


GEMMA = Path(__file__).resolve().parents[1] / "estimate" / "fixtures" / "gemma2_2b" / "config.json"


def _model(root: Path, name: str) -> Path:
    """A gemma-2 folder (a family whose count only transformers gives exactly: highlighting it asks)."""
    folder = root / name
    folder.mkdir(parents=True)
    config = json.loads(GEMMA.read_text())
    config["workbench_test_folder"] = str(folder)  # never asked before: a child
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    return folder.resolve()


async def test_a_model_left_by_the_highlight_stops_its_child(tmp_path: Path) -> None:
    first, second = _model(tmp_path / "work", "first"), _model(tmp_path / "work", "second")
    app = PickerApp([tmp_path / "work"])
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.screen
        options = screen.query_one("#model-list", OptionList)
        await _until(pilot, lambda: str(second) in screen.models, "the two models listed", 60)
        options.highlighted = options.get_option_index(str(first))
        await pilot.pause()
        await _until(pilot, oracle_children, "a child asking about the first model", 60)
        await asyncio.sleep(0.5)  # the child is importing now
        asking_first = set(oracle_children())
        options.highlighted = options.get_option_index(str(second))
        await pilot.pause()
        await _until(pilot, lambda: not asking_first & set(oracle_children()),
                     "the first model's child to stop once the highlight left it", 3)
        options.highlighted = options.get_option_index(str(first))  # back: asked again, one child at a time
        await pilot.pause()
        await asyncio.sleep(1.0)
        assert len(oracle_children()) <= 1
