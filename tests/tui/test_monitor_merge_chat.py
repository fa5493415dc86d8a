"""From a finished run's monitor: merge the LoRA (a real `swift export` job), open the chat with the merged
model as the merge's notification offers (t), and see its answer stream in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from run_fixtures import wait_for
from textual import events
from textual.widgets import Input, Label

from backend.checkpoints.merged import read_merged_model
from backend.rundir.layout import RunFolder
from tests.shared_runs import private_copy
from tests.timing import limit_text, scaled
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.screens.chat import ChatScreen
from tui.screens.monitor import MonitorScreen


@pytest.mark.slow
async def test_merge_then_chat_from_the_monitor(short_lora_run: RunFolder, tmp_path: Path) -> None:
    with private_copy(short_lora_run, tmp_path) as run:  # the merge writes into the run folder
        await _merge_then_chat(run)


async def _merge_then_chat(run: RunFolder) -> None:
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        pilot.app.open_run(run.path)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, MonitorScreen), what="the monitor")
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal), what="the merge question")
        await pilot.press("y")
        merged = run.path / "merged" / "checkpoint-4-merged"
        await wait_for(pilot, lambda: any(n.title == "Merged" for n in pilot.app._notifications), timeout=240,
                       what="the merge to finish")
        model = read_merged_model(merged)
        assert model is not None and (merged / "config.json").is_file()
        await pilot.press("t")  # the notification said: press t to chat (with the merged model)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen), what="the chat screen")
        chat = pilot.app.screen
        await wait_for(pilot, lambda: chat.panes(), what="the merged model found (in the chat's worker)")
        (pane,) = chat.panes()
        assert pane.target.model == str(merged), f"t opened {pane.target.label}, not the merged model it offers"
        assert str(pane.query_one(".pane-title", Label).content) == f"fine-tuned: {run.run_id} checkpoint-4-merged"
        assert pane.target.adapters == ()  # the merged weights alone, no LoRA applied at run time
        await wait_for(pilot, lambda: not pane.has_class("-loading"), timeout=240, what="the merged model to load")
        assert not pane.dead
        chat.query_one("#temperature", Input).value = "0"
        chat.query_one("#max-tokens", Input).value = "200"
        chat.query_one("#prompt", Input).focus()
        await pilot.press(*"who are you?")
        # Enter is posted as a terminal sends it: a pilot's press waits for an idle app, and while chunks
        # stream in it is not, so on a fast machine the whole answer could be over before press returned
        pilot.app.post_message(events.Key("enter", "\r"))
        deadline = time.monotonic() + scaled(20)
        while not pane.busy:
            assert time.monotonic() < deadline, f"waited {limit_text(20)} for the question to be sent"
            await asyncio.sleep(0.002)
        shown: list[str] = []  # the answer bubble as it grows on screen
        deadline = time.monotonic() + scaled(180)
        while pane.busy:
            assert time.monotonic() < deadline, f"waited {limit_text(180)} for the answer's end: {shown[-1:]}"
            bubbles = pane.query(".bubble.answer")
            if bubbles:
                shown.append(str(bubbles.last().content))
            await asyncio.sleep(0.01)
        await pilot.pause()
        final = str(pane.query(".bubble.answer").last().content)
        assert final.strip() and final != "..."
        partial = [text for text in shown if text not in ("...", final)]
        assert partial and all(final.startswith(text) for text in partial), \
            f"the answer never showed in part before its end: {shown[:5]} ... {final!r}"
