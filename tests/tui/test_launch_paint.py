"""The launch workspace's first paint stays small over SSH (#17): what arrives late does not move the layout.

Each re-layout of the workspace rewrites most of the terminal. The memory line holds its row from the
first frame (the forecast arriving does not push the workspace up), and the footer rebuilds its keys
only when the keys it shows change (not at each focus change). The bytes themselves are the bench's
(bench/terminal_traffic.py, "first paint: launch").
"""

from __future__ import annotations

import threading
from pathlib import Path

from run_fixtures import wait_for

from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle, shown, until_shown
from tui.app import WorkbenchApp
from tui.widgets import memory_line
from tui.widgets.quiet import QuietFooter


async def test_the_memory_line_holds_its_row_before_and_after_the_forecast(tiny_model: Path, monkeypatch) -> None:
    released = threading.Event()  # the forecast is computed once the test has looked at the screen without it
    real = memory_line.forecast_summary
    monkeypatch.setattr(memory_line, "forecast_summary", lambda *args: released.wait(30) and real(*args))
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        line = screen.query_one("#memory-line")
        await pilot.pause()
        assert line.display and line.region.height == 1
        assert "Memory forecast: waiting" in shown(line)
        workspace = screen.query_one("#workspace").region
        assert workspace.height == 24 - 3  # the status line, the memory line and the footer
        released.set()
        await until_shown(pilot, line, "Memory (CPU run): host RAM", timeout=30)  # the forecast, in that row
        assert screen.query_one("#workspace").region == workspace


async def test_the_footer_keeps_its_keys_until_the_keys_change(tiny_model: Path) -> None:
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        screen = app.screen
        footer = screen.query_one(QuietFooter)
        await wait_for(pilot, lambda: footer.query("FooterKey"), what="the footer's keys")
        keys = list(footer.query("FooterKey"))
        assert "f5 Launch" in shown(footer) and "^s Save" in shown(footer)
        # another field takes the focus: the same keys, so the same key widgets (nothing rewritten)
        screen.form.editors["model.model_type"].focus_control()
        await settle(pilot)
        assert list(footer.query("FooterKey")) == keys  # widgets compare by identity
        # swift's report on the Data tab has keys of its own: the footer shows them
        screen.form.show_tab("data")
        await pilot.pause()
        screen.query_one("#swift-data").focus()
        await until_shown(pilot, footer, "Next row", timeout=20)
