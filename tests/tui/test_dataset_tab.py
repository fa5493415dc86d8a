"""The Data tab follows its scan on screen: "scanning…" while a (slow) file is read, then what was found;
the first look knows no format rules, and what swift keeps and drops comes from swift's own report.

The scan is held until the screen has shown "scanning…", as a large file would hold it. (The bug this
guards against: reports changed in place and posted again compare equal to what the widget holds, so
the tab stayed on "scanning…" forever; a fast scan hid it.)
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import backend.data.first_look
from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, launch_opened, settle, shown, until_shown
from tui.app import WorkbenchApp
from tui.widgets.dataset_details import DatasetSummary
from tui.widgets.swift_report import SwiftDataReport


async def test_the_data_tab_shows_scanning_then_the_rows(monkeypatch: pytest.MonkeyPatch, tiny_model: Path) -> None:
    release = threading.Event()
    real_scan = backend.data.first_look.scan_dataset

    def slow_scan(*args: object, **kwargs: object) -> object:
        release.wait(60)
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(backend.data.first_look, "scan_dataset", slow_scan)
    app = WorkbenchApp(QUICKSTART, hardware=CPU_BOX)
    async with app.run_test(size=(120, 40)) as pilot:
        await launch_opened(pilot)
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


async def test_the_data_tab_shows_swifts_own_kept_and_dropped_counts(tmp_path: Path, tiny_model: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "Fine?"}, {"role": "assistant", "content": "Fine."}]},
            {"messages": [{"role": "wizard", "content": "abracadabra"}, {"role": "assistant", "content": "no"}]},
            {"messages": []}]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    profile = tmp_path / "mixed.toml"
    profile.write_text('name = "mixed"\n[model]\nsource = "builtin:tiny-qwen2"\nmodel_type = "qwen2"\n'
                       'template = "qwen"\n[data]\ntrain = ["./mixed.jsonl"]\n[training]\nmax_length = 512\n',
                       encoding="utf-8")
    app = WorkbenchApp(profile, hardware=CPU_BOX)
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(pilot)
        app.screen.form.show_tab("data")
        await settle(pilot)
        first = shown(app.screen.query_one(DatasetSummary))
        # the first look: facts of the file, no guess at what swift keeps
        assert first.startswith("./mixed.jsonl [local] 3 rows · first look: what swift keeps comes from swift's "
                                "own report keys: messages: 3 rows"), first
        assert "drop" not in first
        swift = await until_shown(pilot, app.screen.query_one(SwiftDataReport), "swift keeps 1 of 3 rows; drops 2")
        assert "./mixed.jsonl swift keeps 1 of 3 rows; drops 2 ✗ line 2:" in swift, swift
        assert "✗ line 3:" in swift, swift
