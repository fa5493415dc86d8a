"""The Data tab follows its scan on screen: "scanning…" while a (slow) file is read, then what was found.

The scan is held until the screen has shown "scanning…", as a large file would hold it. (The bug this
guards against: reports changed in place and posted again compare equal to what the widget holds, so
the tab stayed on "scanning…" forever; a fast scan hid it.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import backend.inspect_data
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, shown
from tui.app import WorkbenchApp
from tui.widgets.dataset_details import DatasetSummary


async def test_the_data_tab_shows_scanning_then_the_rows(monkeypatch: pytest.MonkeyPatch, tiny_model: Path) -> None:
    release = threading.Event()
    real_scan = backend.inspect_data.scan_dataset

    def slow_scan(*args: object, **kwargs: object) -> object:
        release.wait(60)
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(backend.inspect_data, "scan_dataset", slow_scan)
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(120, 40)) as pilot:
        app.screen.form.show_tab("data")
        summary = app.screen.query_one(DatasetSummary)

        async def until(text: str) -> None:
            deadline = time.monotonic() + 60
            while text not in shown(summary):
                assert time.monotonic() < deadline, f"the Data tab never showed {text!r}: {shown(summary)[:200]!r}"
                await pilot.pause(0.05)

        await until("builtin:self-cognition [builtin] scanning…")
        release.set()
        await until("builtin:self-cognition [builtin] 53 rows")
        assert "scanning" not in shown(summary)
