"""The model picker says where a parameter count comes from, and asks transformers in a worker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from textual.app import App
from textual.widgets import OptionList, Static

from tests.tui.conftest import shown
from tui.modals.model_picker import ModelPickerScreen

GEMMA = Path(__file__).resolve().parents[1] / "estimate" / "fixtures" / "gemma2_2b" / "config.json"


class PickerApp(App[None]):
    def __init__(self, roots: list[Path]) -> None:
        super().__init__()
        self.roots = roots

    def on_mount(self) -> None:
        self.push_screen(ModelPickerScreen("", self.roots))


async def _until(pilot, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)
        await pilot.pause()


async def test_gemma_estimate_becomes_the_exact_count_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "work" / "gemma-2-2b"
    folder.mkdir(parents=True)
    # a config of its own (the oracle cache is shared by the session): gemma-2-2b's, one key added
    config = json.loads(GEMMA.read_text())
    config["workbench_test_folder"] = str(tmp_path)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    app = PickerApp([tmp_path / "work"])
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.screen
        options = screen.query_one("#model-list", OptionList)
        ref = str(folder.resolve())
        await _until(pilot, lambda: options.option_count > 1 and ref in screen.models, 60)
        # the formula's count, labelled: gemma-2's config omits tie_word_embeddings
        assert "estimated, not exact" in str(options.get_option(ref).prompt)
        options.highlighted = options.get_option_index(ref)
        await pilot.pause()
        preview = screen.query_one("#model-preview", Static)
        assert "asking transformers" in shown(preview)  # announced, and the UI keeps answering
        await pilot.press("down", "up")
        await _until(pilot, lambda: "exact (transformers)" in str(options.get_option(ref).prompt), 300)
        prompt = str(options.get_option(ref).prompt)
        assert "2.61 B (2,614,341,888)" in prompt
        assert "exact (transformers)" in shown(preview) and "tied embeddings" in shown(preview)
