"""The launch workspace as a new user meets it (#41): at 80x24 the settings form keeps most of the screen (the
details pane takes three lines of problems until F6 gives it the focus), and the Output tab's description is
shown whole in its box, with no scrollbar's fragments beside it, at 120x36 and 80x24."""

from __future__ import annotations

import pytest
from textual.widgets import TextArea

from tests.tui.conftest import QUICKSTART, settle, shown
from tui.app import WorkbenchApp


async def test_the_form_keeps_most_of_an_80x24_screen() -> None:
    async with WorkbenchApp(QUICKSTART).run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert pilot.app.screen.query_one("#settings").size.height >= 15  # of 24 rows (it had 12)
        assert pilot.app.screen.query_one("#details").outer_size.height == 6
        await pilot.press("f6")  # the details pane, focused, grows
        await pilot.pause()
        assert pilot.app.screen.query_one("#details").outer_size.height > 6


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_the_output_tabs_description_is_shown_whole(size: tuple[int, int]) -> None:
    async with WorkbenchApp(QUICKSTART).run_test(size=size) as pilot:
        await settle(pilot)
        for _ in range(6):  # Model, Data, Tuner, Precision, Distribution, Training, Output
            await pilot.press("ctrl+t")
            await pilot.pause()
        await settle(pilot)
        area = pilot.app.screen.query_one("#field-description TextArea", TextArea)
        assert area.size.height == area.wrapped_document.height  # as tall as its text
        assert not area.show_vertical_scrollbar
        text = shown(area)
        assert "Runs on any machine in a few minutes; the loss falls from about 6.5 to well under 1." in text
