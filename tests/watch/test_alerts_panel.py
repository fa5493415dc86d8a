"""The monitor's alerts panel: lists the run's alerts, toasts and rings for new ones only."""

from __future__ import annotations

import json
from pathlib import Path

from textual.app import App, ComposeResult

from tests.tui.run_fixtures import wait_for
from tui.widgets.alerts_panel import AlertsPanel


def _append(folder: Path, **alert: object) -> None:
    with open(folder / "alerts.jsonl", "a") as handle:
        handle.write(json.dumps({"v": 1, "type": "alert", "time": 1_790_000_000.0, "action": "alert", **alert}) + "\n")


class PanelApp(App[None]):
    def __init__(self, folder: Path, bell: bool, hold_first_read: bool = False):
        super().__init__()
        self.folder, self.want_bell, self.bells, self.hold_first_read = folder, bell, 0, hold_first_read

    def compose(self) -> ComposeResult:
        panel = AlertsPanel(self.folder, bell=self.want_bell, poll_seconds=60, id="alerts")
        if self.hold_first_read:  # the first read's worker waits on this lock, as a busy machine makes it wait
            panel._reading.acquire()
        yield panel

    def bell(self) -> None:
        self.bells += 1


async def test_panel_hidden_until_an_alert_then_lists_and_toasts(tmp_path: Path) -> None:
    app = PanelApp(tmp_path, bell=True)
    async with app.run_test() as pilot:
        panel = app.query_one(AlertsPanel)
        assert not panel.display or not panel.has_class("-shown")
        await app.workers.wait_for_complete()  # the first read (of nothing) is done: what follows is new
        _append(tmp_path, id="a", kind="nonfinite", step=6, message="grad_norm became NaN/inf at step 6 (rank 0)")
        _append(tmp_path, id="b", kind="hang", step=40, message="no progress for 9 s after step 40 [limit 8 s]",
                action="stop")
        assert [a.kind for a in panel.check()] == ["nonfinite", "hang"]
        await pilot.pause()
        assert panel.has_class("-shown") and panel.region.height >= 2
        text = str(panel.render())
        assert "nonfinite at step 6: grad_norm became NaN/inf at step 6 (rank 0)" in text
        assert "hang at step 40: no progress for 9 s after step 40 [limit 8 s] (run stopped)" in text  # no markup
        assert [n.title for n in app._notifications] == ["nonfinite at step 6", "hang at step 40"]
        assert app.bells == 1
        assert panel.check() == []  # nothing new: no toast, no bell
        assert app.bells == 1


async def test_an_alert_that_lands_before_the_first_read_is_still_rung(tmp_path: Path) -> None:
    """The first read runs in a worker: what arrives after the monitor opened but before that worker reads
    is new (the CI machine under load once listed both of these as old, silently)."""
    _append(tmp_path, id="old", kind="failed", step=812, message="CUDA out of memory")
    app = PanelApp(tmp_path, bell=True, hold_first_read=True)
    async with app.run_test() as pilot:
        panel = app.query_one(AlertsPanel)
        await pilot.pause()
        _append(tmp_path, id="a", kind="nonfinite", step=6, message="grad_norm became NaN/inf at step 6")
        panel._reading.release()
        await wait_for(pilot, lambda: len(panel.alerts) == 2)
        await pilot.pause()
        assert [n.title for n in app._notifications] == ["nonfinite at step 6"]
        assert app.bells == 1
        shown = str(panel.render())
        assert "failed at step 812: CUDA out of memory" in shown and "nonfinite at step 6" in shown


async def test_alerts_from_before_the_monitor_opened_are_listed_not_rung(tmp_path: Path) -> None:
    _append(tmp_path, id="old", kind="failed", step=812, message="CUDA out of memory")
    app = PanelApp(tmp_path, bell=True)
    async with app.run_test() as pilot:
        await pilot.pause()
        panel = app.query_one(AlertsPanel)
        assert "failed at step 812: CUDA out of memory" in str(panel.render())
        assert app.bells == 0 and list(app._notifications) == []


async def test_wrong_typed_alert_lines_are_skipped_and_said(tmp_path: Path) -> None:
    _append(tmp_path, id="bad", kind="hang", step=3, message="no progress")
    _append(tmp_path, id="old", kind="failed", step=812, message="CUDA out of memory")
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace("1790000000.0", '"yesterday"')
    (tmp_path / "alerts.jsonl").write_text("\n".join(lines) + "\n")
    app = PanelApp(tmp_path, bell=True)
    async with app.run_test() as pilot:
        await pilot.pause()
        panel = app.query_one(AlertsPanel)
        shown = str(panel.render()).splitlines()
        assert len(shown) == 2 and shown[0].endswith(" failed at step 812: CUDA out of memory")
        assert shown[1] == "⚠ 1 damaged line of alerts.jsonl skipped (field time is not a time: yesterday)"


async def test_app_wide_toasts_for_any_run_new_alerts_only(isolated_runs: Path) -> None:
    from tui.widgets.alerts_panel import start_alert_toasts

    old = isolated_runs / "20260101-old-aaaa"
    old.mkdir(parents=True)
    (old / "state.json").write_text("{}")
    _append(old, id="o", kind="failed", step=3, message="seen long ago")

    class Bare(App[None]):
        bells = 0

        def on_mount(self) -> None:
            self.alert_toaster = start_alert_toasts(self)

        def bell(self) -> None:
            self.bells += 1

    app = Bare()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.alert_toaster.check() == [] and list(app._notifications) == []
        fresh = isolated_runs / "20260102-new-bbbb"
        fresh.mkdir()
        (fresh / "state.json").write_text("{}")
        _append(fresh, id="n", kind="hang", step=40, message="no progress for 9 s")
        _append(old, id="o2", kind="disk", step=None, message="disk low")
        assert sorted(a.id for a in app.alert_toaster.check()) == ["n", "o2"]
        await pilot.pause()
        assert sorted(n.title for n in app._notifications) == ["20260101-old-aaaa: disk", "20260102-new-bbbb: hang at step 40"]
        assert app.bells == 0  # no [notify] bell in these runs
