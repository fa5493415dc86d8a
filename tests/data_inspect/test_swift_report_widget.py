"""The Data tab's swift report widget and the trained-token view, as the user sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from backend.data.swift_view import DataRequest, ask_row
from backend.profile import load_profile
from tests.tui.conftest import oracle_children, shown, shown_bold
from tui.screens.launch_support import launch_summary
from tui.widgets.swift_report import SwiftDataQuery, SwiftDataReport
from tui.widgets.trained_tokens import TrainedTokenView


class ReportApp(App[None]):
    def __init__(self, query: SwiftDataQuery) -> None:
        super().__init__()
        self.data_query = query

    def compose(self) -> ComposeResult:
        yield SwiftDataReport(id="report")

    def on_mount(self) -> None:
        self.query_one(SwiftDataReport).question = self.data_query


async def _settle(pilot: Any) -> None:
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def test_report_replaces_the_wait_and_rows_step_with_brackets(data_profile: Path) -> None:
    app = ReportApp(SwiftDataQuery.of(load_profile(data_profile), data_profile.parent))
    async with app.run_test(size=(120, 60)) as pilot:
        await _settle(pilot)
        widget = app.query_one(SwiftDataReport)
        assert widget.failure is None
        text = shown(widget)  # what the terminal shows
        assert text.startswith("swift's own report ./messages.jsonl swift keeps 3 of 3 rows"), text
        assert "./malformed.jsonl swift keeps 1 of 3 rows; drops 2 ✗ line 2: AssertionError" in text
        assert "steps per epoch: 2 (8 rows, batch 2 × accumulation 2 × 1 processes)" in text
        # the launch confirmation (F5) says the same, from this report (README: "The launch confirmation
        # gives the steps per epoch and the truncation")
        dialog = launch_summary(load_profile(data_profile), [])
        assert "\ndata      2 steps per epoch (8 rows) · no row over max_length · " in dialog, dialog
        view = app.query_one(TrainedTokenView)
        assert "row 1 of ./messages.jsonl, line 1" in shown(view)
        assert "Blue on a clear day.<|im_end|>↵" in shown_bold(view)  # the trained part, drawn as trained
        widget.focus()
        await pilot.press("right_square_bracket")
        await _settle(pilot)
        assert "row 2 of ./messages.jsonl, line 2" in shown(view)
        assert "Seven.<|im_end|>↵" in shown_bold(view) and "Blue on a clear day." not in shown(view)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await _settle(pilot)
        assert "row 1 of ./messages.jsonl, line 1" in shown(view)  # no row 0: the first row stays


@pytest.mark.one_shot_oracle  # which child a replaced query kills: no kept warm child beside it
async def test_a_query_replaced_before_its_answer_stops_its_swift_child(data_profile: Path) -> None:
    """An edit that changes the question (here max_length) stops the child still reading for the old one."""
    import time

    profile = load_profile(data_profile)
    profile.training.max_length = 333  # a question no other test asks: a real child starts
    app = ReportApp(SwiftDataQuery.of(profile, data_profile.parent))
    async with app.run_test(size=(120, 60)) as pilot:
        deadline = time.monotonic() + 60
        while not (started := oracle_children()):
            assert time.monotonic() < deadline, "no swift child started for the report"
            await pilot.pause(0.05)
        widget = app.query_one(SwiftDataReport)
        widget.question = SwiftDataQuery.of(load_profile(data_profile), data_profile.parent)  # the user edits
        deadline = time.monotonic() + 10
        while set(started) & set(oracle_children()):
            assert time.monotonic() < deadline, f"the child of the replaced query still runs: {started}"
            await pilot.pause(0.05)


@pytest.fixture(scope="session")
def row_answer(formats_request: DataRequest) -> dict[str, Any]:
    answer = ask_row(formats_request, 1, dataset=0)  # messages.jsonl, row 1
    return {**answer, "ref": "messages.jsonl"}  # the session's temporary folder stays out of the picture


class RowApp(App[None]):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__()
        self.answer = answer

    def compose(self) -> ComposeResult:
        yield TrainedTokenView()

    def on_mount(self) -> None:
        self.query_one(TrainedTokenView).answer = self.answer


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_trained_token_view_snapshot(snap_compare, row_answer: dict[str, Any], size: tuple[int, int]) -> None:
    assert snap_compare(RowApp(row_answer), terminal_size=size)


def test_trained_token_view_cut_snapshot(snap_compare, row_answer: dict[str, Any]) -> None:
    """The same row at max_length 60 under right truncation: the cut is marked, the rest struck out."""
    cut, position, segments = 60, 0, []
    for segment in row_answer["segments"]:
        segments.append({**segment, "lost": position >= cut})
        position += segment["tokens"]
    answer = {**row_answer, "segments": segments, "max_length": cut, "truncation_strategy": "right",
              "over_max_length": True, "deleted": False, "kept": [0, cut]}
    assert snap_compare(RowApp(answer), terminal_size=(80, 24))
