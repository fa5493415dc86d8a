"""The settings form fills its hidden tabs by itself after the first frame (Textual's Lazy), and the
dialogs answer with typed values (True/False, an Enum), never with strings to compare."""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.screen import ModalScreen

from tui.modals.dialogs import Choice, ConfirmModal, ConfirmScreen
from tui.profile_document import ProfileDocument
from tui.profile_fields import TABS
from tui.widgets.settings_tabs import SettingsTabs


class FormApp(App[None]):
    def compose(self) -> ComposeResult:
        yield SettingsTabs(ProfileDocument(), beside={}, id="settings")


async def test_the_hidden_tabs_are_filled_after_the_first_frame_without_being_shown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backend.launch.swift_schema.load_schema", lambda **_: None)  # no swift child for this test
    app = FormApp()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.pause()
        form = app.query_one(SettingsTabs)
        assert form.active_tab == TABS[0][0]  # nothing else was shown
        unmounted = [path for path, editor in form.editors.items() if not editor.is_mounted]
        assert unmounted == []
        form.show_tab("training")
        await pilot.pause()
        assert form.editors["training.learning_rate"].is_mounted and form.editors["training.learning_rate"].display


class Unsaved(Enum):
    SAVE = "save"
    DISCARD = "discard"


class DialogApp(App[None]):
    def __init__(self, dialog: ModalScreen[Any]) -> None:
        super().__init__()
        self.dialog = dialog
        self.answers: list[Any] = []

    def on_mount(self) -> None:
        self.push_screen(self.dialog, self.answers.append)


def _unsaved() -> ConfirmScreen[Unsaved | None]:
    return ConfirmScreen("Unsaved changes", "Quit?", [Choice("Save and quit", Unsaved.SAVE, "primary", "save"),
                                                      Choice("Quit without saving", Unsaved.DISCARD, "error"),
                                                      Choice("Cancel", None)])


@pytest.mark.parametrize(("keys", "answer"), [
    (["enter"], Unsaved.SAVE),  # the first answer has the focus
    (["tab", "enter"], Unsaved.DISCARD),
    (["tab", "tab", "enter"], None),
    (["escape"], None),
])
async def test_a_choice_dialog_answers_the_value_of_the_chosen_button(keys: list[str], answer: Unsaved | None) -> None:
    app = DialogApp(_unsaved())
    async with app.run_test() as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        assert app.answers == [answer]


@pytest.mark.parametrize(("keys", "answer"), [(["enter"], False), (["y"], True), (["escape"], False),
                                              (["tab", "enter"], True)])
async def test_a_confirmation_answers_true_or_false_and_cancel_has_the_focus(keys: list[str], answer: bool) -> None:
    app = DialogApp(ConfirmModal("Delete the run", "It goes for good.", "Delete"))
    async with app.run_test() as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        assert app.answers == [answer]
