"""The Data tab's first look at every train/val entry: records, lines that are not JSON, key sets, a raw preview.

The widget owns its scan: the screen binds `question` (the dataset entries and the folder they are
relative to) and a thread worker reads each file. Each step posts a new tuple holding new reports (never
the same objects changed), so what is shown always follows what was found.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.reactive import var
from textual.widgets import Static

from backend.core.safe_text import visible
from backend.data.first_look import DatasetReport, inspect_ref, parse_ref
from tui.worker_failures import WorkerFailures, failure_text

PREVIEW_CHARS = 160


def report_text(report: DatasetReport, *, preview_rows: int = 2, bad_shown: int = 5,
                key_sets_shown: int = 6) -> Text:
    """The first look at one dataset entry: records, lines that are not JSON, key sets, lengths and the
    first records' JSON (text from the file shown as text, control characters as escapes). What swift keeps
    of it is swift's own report's to say (tui/widgets/swift_report.py), shown after it."""
    ref = report.ref
    text = Text()
    text.append(visible(ref.ref), style="bold")
    sample = f", {ref.sample:,} rows sampled" if ref.sample else ""
    text.append(f"  [{ref.kind}{sample}]\n", style="dim")
    if ref.problem:
        text.append(f"✗ {visible(ref.problem)}\n", style="red")
        return text
    if ref.kind == "hub":
        text.append("hub dataset: swift downloads it at launch; it cannot be previewed offline\n", style="dim")
        return text
    scan = report.scan
    if scan is None:
        text.append("scanning…\n", style="dim")
        return text
    if scan.unreadable:
        text.append(f"✗ {visible(scan.unreadable)}\n", style="bold red")
    state = "" if scan.complete else " (scan stopped early)"
    text.append(f"{scan.records:,} rows")
    if scan.bad_count:
        text.append(f", {scan.bad_count:,} not valid JSON", style="bold red")
    text.append(f"{state} · first look: what swift keeps comes from swift's own report\n", style="")
    for bad in scan.bad[:bad_shown]:
        text.append(f"  ✗ {visible(bad)}\n", style="red")
    if scan.bad_count > bad_shown:
        text.append(f"  … and {scan.bad_count - bad_shown:,} more\n", style="red")
    if scan.key_sets:
        counts = scan.key_sets.most_common()
        shown = ", ".join(f"{visible(keys, limit=60)}: {rows:,} rows" for keys, rows in counts[:key_sets_shown])
        more = f", … {len(counts) - key_sets_shown} more key sets" if len(counts) > key_sets_shown else ""
        text.append(f"keys: {shown}{more}\n")
    if scan.chars:
        text.append(scan.chars.describe("characters per record") + "\n")
    for number, raw in enumerate(scan.preview[:preview_rows], start=1):
        text.append(f"record {number}: ", style="dim")
        text.append(visible(raw, limit=PREVIEW_CHARS) + "\n")
    return text


@dataclass(frozen=True)
class DataQuery:
    """What the profile says about its data."""

    refs: tuple[str, ...]
    base_dir: Path


class DatasetSummary(WorkerFailures, Static):
    """One report per dataset entry, in profile order."""

    question: var[DataQuery | None] = var(None, init=False)  # what to show: set by the screen (data_bind)
    """The entries to report on (bound to the screen's)."""
    reports: var[tuple[DatasetReport, ...]] = var((), init=False)
    """What is known so far, one report per entry."""

    class Scanned(Message, bubble=False):
        def __init__(self, query: DataQuery, reports: tuple[DatasetReport, ...]) -> None:
            super().__init__()
            self.question, self.reports = query, reports

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._stop = threading.Event()

    def on_unmount(self) -> None:
        self._stop.set()

    def watch_question(self, query: DataQuery | None) -> None:
        self._stop.set()
        self._stop = threading.Event()
        if query is not None:
            self._scan(query, self._stop)

    def watch_reports(self) -> None:
        text = Text()
        for report in self.reports:
            text.append_text(report_text(report))
            text.append("\n")
        text.rstrip()
        self.update(text if self.reports else Text("no dataset chosen", style="dim"))

    def show_failure(self, message: str) -> None:
        self.update(failure_text(message))

    def retry(self) -> None:
        if self.question is not None:
            self.watch_question(self.question)

    @work(thread=True, exclusive=True, group="dataset-scan", exit_on_error=False, description="Scanning the datasets")
    def _scan(self, query: DataQuery, stop: threading.Event) -> None:
        reports = [DatasetReport(parse_ref(ref, query.base_dir)) for ref in query.refs]
        self.post_message(self.Scanned(query, tuple(reports)))  # the entries at once, "scanning…" each
        for index, ref in enumerate(query.refs):
            if stop.is_set():
                return
            reports[index] = inspect_ref(ref, base_dir=query.base_dir, stop=stop)  # a new report, never changed
            self.post_message(self.Scanned(query, tuple(reports)))  # tokens: swift's own report (swift_report.py)

    @on(Scanned)
    def _scanned(self, event: Scanned) -> None:
        if event.question == self.question:
            self.reports = event.reports

