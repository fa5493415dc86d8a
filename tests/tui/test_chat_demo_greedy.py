"""The chat with the built-in demo model is greedy by default and says so (#41): sampled, the tiny model answers
in broken mixed scripts, and the first chat should show what training did. Other models keep 0.7."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input, Static

from backend.checkpoints.targets import ModelTarget
from backend.models.demo.build import builtin_model_path
from tests.tui.conftest import shown
from tui.screens.chat import ChatScreen
from tui.widgets.chat_pane import ChatPane


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("host")


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_the_demo_models_chat_is_greedy_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          size: tuple[int, int]) -> None:
    monkeypatch.setattr(ChatPane, "start_worker", lambda self, restart=False: None)  # no model process here
    demo = ModelTarget(model=str(builtin_model_path("tiny-qwen2")), adapters=(str(tmp_path / "checkpoint-40"),))
    async with Host().run_test(size=size) as pilot:
        screen = ChatScreen(demo)
        await pilot.app.push_screen(screen)
        await pilot.pause()
        assert screen.query_one("#temperature", Input).value == "0"
        assert shown(screen.query_one("#temperature-label")) == (
            "Temperature (0 = greedy: the default for the built-in demo model, whose samples are noise)")
        assert screen.settings().temperature == 0.0


async def test_another_models_chat_samples_at_0_7(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(ChatPane, "start_worker", lambda self, restart=False: None)
    async with Host().run_test(size=(120, 36)) as pilot:
        screen = ChatScreen(ModelTarget(model=str(tmp_path / "some-model")))
        await pilot.app.push_screen(screen)
        await pilot.pause()
        assert screen.query_one("#temperature", Input).value == "0.7"
        assert shown(screen.query_one("#temperature-label")) == "Temperature (0 = greedy)"
