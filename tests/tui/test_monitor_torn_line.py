"""An ended run whose events.jsonl ends with a torn line longer than 1 KiB (a full disk, a crashed node):
the monitor opens, and says the line is damaged; its feed never loops over the line."""

from __future__ import annotations

import threading
from pathlib import Path

from run_fixtures import fixture_run, open_monitor

from tui.app import WorkbenchApp
from tui.feed import RunFeed

TORN = b'{"v":1,"type":"log","time":1.0,"rank":0,"step":41,"note":"' + b"x" * 2000  # no closing, no newline


def test_the_feed_reads_a_torn_long_last_line_once_and_counts_it(tmp_path: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    with open(run.events_path, "ab") as handle:
        handle.write(TORN)
    feed, polls = RunFeed(run.path), []
    worker = threading.Thread(target=lambda: polls.append(feed.poll()), daemon=True)
    worker.start()
    worker.join(10)
    assert polls == [True], "RunFeed.poll did not return: it loops over the torn line"
    assert not feed.has_backlog() and feed.store.bad_lines == 1 and feed.store.log_events == 21
    assert feed.poll() is False and feed.store.bad_lines == 1  # said once, not once per poll


async def test_the_monitor_opens_a_run_ending_in_a_torn_long_line(tmp_path: Path, isolated_runs: Path) -> None:
    run = fixture_run(tmp_path, "quickstart-short")
    with open(run.events_path, "ab") as handle:
        handle.write(TORN)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=(160, 48)) as pilot:
        screen = await open_monitor(pilot, run.path)
        summary = str(screen.query_one("#loss-summary").content)
        assert summary.startswith("train ") and summary.endswith("· 1 damaged line skipped")
