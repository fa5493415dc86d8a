"""Confirmation dialogs say which button Enter presses (#41): the focused one, named on screen and
following the focus."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from tui.modals.dialogs import Choice, ConfirmModal, ConfirmScreen


class Host(App[None]):
    CSS_PATH = "../../tui/app.tcss"

    def compose(self) -> ComposeResult:
        yield Static("host")


def screen_text(app: App[None]) -> str:
    return "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_a_confirmation_says_what_enter_presses(size: tuple[int, int]) -> None:
    answers: list[bool | None] = []
    async with Host().run_test(size=size) as pilot:
        await pilot.app.push_screen(ConfirmModal("Stop the run", "Stop run 20261201-232916-golden-2?", "Stop"),
                                    answers.append)
        await pilot.pause()
        assert "Enter: Cancel · Tab: next · Esc: cancel · y: Stop" in screen_text(pilot.app)
        await pilot.press("tab")
        await pilot.pause()
        assert "Enter: Stop · Tab: next · Esc: cancel · y: Stop" in screen_text(pilot.app)
        await pilot.press("enter")
        await pilot.pause()
        assert answers == [True]


async def test_a_dialog_of_several_answers_names_the_focused_one() -> None:
    async with Host().run_test(size=(80, 24)) as pilot:
        choices = [Choice("Start now", "now"), Choice("Queue", "queue"), Choice("Cancel", None)]
        await pilot.app.push_screen(ConfirmScreen("Launch", "Start the run now or queue it?", choices))
        await pilot.pause()
        assert "Enter: Start now · Tab: next · Esc: cancel" in screen_text(pilot.app)
