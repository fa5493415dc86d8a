"""Alerts are read off the UI thread, and a read that fails is said where it happened - never the
end of the app. The failure planted: a run's alerts.jsonl that is a folder (IsADirectoryError)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from run_fixtures import fixture_run, wait_for
from textual.app import App, ComposeResult
from textual.message import Message
from textual.notifications import Notify

import tui.widgets.alerts_panel as alerts_panel
from backend.rundir import index
from tests.tui.conftest import shown
from tui.app import WorkbenchApp
from tui.widgets.alerts_panel import AlertsPanel


def append_alert(folder: Path, step: int, message: str) -> None:
    with open(folder / "alerts.jsonl", "a") as handle:
        handle.write(json.dumps({"v": 1, "type": "alert", "kind": "hang", "message": message, "step": step,
                                 "time": 1795951000.0, "evidence": {}, "action": "alert", "id": f"a{step}"}) + "\n")


def toasts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.notification.title, m.notification.message) for m in messages if isinstance(m, Notify)]


def runs_with_a_broken_one(workspace: Path) -> tuple[Path, Path]:
    good, broken = (fixture_run(workspace, name).path for name in ("quickstart-short", "broken-data"))
    for folder in (good, broken):
        index.register(folder)
    return good, broken


async def test_the_toaster_says_an_unreadable_alerts_file_and_still_toasts_the_others(isolated_runs: Path) -> None:
    good, broken = runs_with_a_broken_one(isolated_runs)
    messages: list[Message] = []
    app = WorkbenchApp(None, start_mode="runs")
    async with app.run_test(size=(160, 40), message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.alert_toaster is not None and app.alert_toaster.offsets is not None,
                       what="the toaster's first read")
        (broken / "alerts.jsonl").mkdir()  # a folder where the file should be
        (broken / "alerts.jsonl" / "x").write_text("x" * 100)
        append_alert(good, 12, "no step for 60 s")
        assert [a.message for a in app.alert_toaster.check()] == ["no step for 60 s"]
        await pilot.pause()
        said = toasts(messages)
        assert ("quickstart-short: hang at step 12", "no step for 60 s") in said
        problem = [message for title, message in said if title == "broken-data: its alerts cannot be read"]
        assert len(problem) == 1 and "IsADirectoryError" in problem[0] and "alerts.jsonl" in problem[0]
        assert app.alert_toaster.check() == []  # said once, not at every read
        await pilot.pause()
        assert len(toasts(messages)) == len(said)
        assert app.is_running


async def test_the_toasters_timer_reads_in_a_worker_and_the_app_keeps_running(
        isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, broken = runs_with_a_broken_one(isolated_runs)
    readers: list[threading.Thread] = []
    real = alerts_panel.read_alerts

    def read_alerts(*args, **kwargs):  # type: ignore[no-untyped-def]
        readers.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(alerts_panel, "read_alerts", read_alerts)
    messages: list[Message] = []
    app = WorkbenchApp(None, start_mode="runs", alert_seconds=0.2)
    async with app.run_test(size=(160, 40), message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.alert_toaster is not None and app.alert_toaster.offsets is not None,
                       what="the toaster's first read")
        (broken / "alerts.jsonl").mkdir()
        (broken / "alerts.jsonl" / "x").write_text("x" * 100)
        append_alert(good, 30, "no step for 90 s")
        await wait_for(pilot, lambda: any(title == "broken-data: its alerts cannot be read"
                                          for title, _ in toasts(messages)), what="the broken run said")
        await wait_for(pilot, lambda: ("quickstart-short: hang at step 30", "no step for 90 s") in toasts(messages),
                       what="the good run's alert")
        assert readers and threading.main_thread() not in readers
        await pilot.pause(0.5)  # more timer ticks: the app goes on, the problem is not said again
        assert app.is_running
        assert sum(title == "broken-data: its alerts cannot be read" for title, _ in toasts(messages)) == 1


class PanelApp(App[None]):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def compose(self) -> ComposeResult:
        yield AlertsPanel(self.folder, bell=False, poll_seconds=0.2, id="alerts")


async def test_the_monitors_panel_says_an_unreadable_alerts_file_in_place(tmp_path: Path) -> None:
    (tmp_path / "alerts.jsonl").mkdir()
    app = PanelApp(tmp_path)
    async with app.run_test(size=(100, 10)) as pilot:
        panel = app.query_one(AlertsPanel)
        await wait_for(pilot, lambda: "IsADirectoryError" in shown(panel), what="the failure in the panel")
        assert "Reading the run's alerts failed" in shown(panel) and "ctrl+r" in shown(panel)
        await pilot.pause(0.5)  # the timer goes on reading in workers
        assert app.is_running
