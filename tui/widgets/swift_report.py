"""The Data tab's answer from ms-swift itself: swift's report on the profile's datasets and the
trained-token view of their rows.

The widget owns its worker: the screen binds `question` (the profile and its folder); the worker asks
the `swift_data` oracle in a child process (cached by file content + model + template + max_length),
streaming its progress lines here; the report comes after the first look, which reads only the file
(rows, JSON validity, keys, a raw preview). The first rows' trained-token views come with the report;
`]` / `[` step through the rows (other rows are asked for, cached too).
A failure shows in place (WorkerFailures), never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import get_current_worker

from backend.data.view import report_text
from tui.widgets.trained_tokens import TrainedTokenView
from tui.worker_failures import WorkerFailures, failure_text


@dataclass(frozen=True)
class SwiftDataQuery:
    """The profile whose data swift reads. Two queries are equal when what swift's answer depends on
    is (model, data, template, max_length, batch, processes, extra swift args), so editing, say, the
    learning rate asks nothing again."""

    profile: Any = field(compare=False)  # LaunchProfile
    base_dir: Path | None = None
    key: str = ""

    @classmethod
    def of(cls, profile: Any, base_dir: Path | None) -> SwiftDataQuery:
        import json

        t, d = profile.training, profile.distribution
        key = json.dumps({"model": profile.model.model_dump(), "data": profile.data.model_dump(),
                          "training": [t.max_length, t.per_device_train_batch_size, t.gradient_accumulation_steps],
                          "world": d.world_size, "extra": profile.extra_swift_args}, sort_keys=True, default=str)
        return cls(profile.model_copy(deep=True), base_dir, key)


class SwiftDataReport(WorkerFailures, Vertical, can_focus=True):
    """swift's report on the profile's training data, and one row's trained tokens."""

    DEFAULT_CSS = """
    SwiftDataReport {
        height: auto;
        padding: 0 1;
    }
    SwiftDataReport > #swift-report {
        height: auto;
    }
    SwiftDataReport:focus {
        background: $boost;
    }
    """

    BINDINGS = [
        Binding("right_square_bracket", "row(1)", "Next row", tooltip="Trained-token view of the next row"),
        Binding("left_square_bracket", "row(-1)", "Previous row", tooltip="Trained-token view of the previous row"),
    ]

    SETTLE_S = 0.6  # an edited query is asked once it has stayed the same this long

    question: var[SwiftDataQuery | None] = var(None, init=False)  # what to show: set by the screen (data_bind)
    report: var[dict[str, Any] | None] = var(None, init=False)
    row: var[int] = var(1, init=False)

    class Progress(Message, bubble=False):
        def __init__(self, query: SwiftDataQuery, line: str) -> None:
            super().__init__()
            self.question, self.line = query, line

    class Reported(Message, bubble=False):
        def __init__(self, query: SwiftDataQuery, report: dict[str, Any] | None, note: str = "") -> None:
            super().__init__()
            self.question, self.report, self.note = query, report, note

    class RowShown(Message, bubble=False):
        def __init__(self, query: SwiftDataQuery, row: int, answer: dict[str, Any]) -> None:
            super().__init__()
            self.question, self.row, self.answer = query, row, answer

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._pending: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("swift's report: waiting for the profile", style="dim"), id="swift-report")
        yield TrainedTokenView(id="trained-tokens")

    def watch_question(self, old: SwiftDataQuery | None, query: SwiftDataQuery | None) -> None:
        self.report = None
        self.row = 1
        self.query_one(TrainedTokenView).answer = None
        self.workers.cancel_group(self, "swift-data")  # its child is stopped: nobody waits for that answer
        self.workers.cancel_group(self, "swift-row")
        if self._pending is not None:
            self._pending.stop()
            self._pending = None
        if query is None:
            return
        self._status("swift: reading the data with its own loader and template…")
        if old is None:
            self._ask(query)
        else:  # an edit (a keystroke in model_type, say): ask once the typing pauses, not per key
            self._pending = self.set_timer(self.SETTLE_S, lambda: self._ask(query))

    def _status(self, line: str) -> None:
        self.query_one("#swift-report", Static).update(Text(line, style="dim"))

    def show_failure(self, message: str) -> None:
        self.query_one("#swift-report", Static).update(failure_text(message))

    def retry(self) -> None:
        if self.question is not None:
            self.watch_question(None, self.question)

    @work(thread=True, exclusive=True, group="swift-data", exit_on_error=False,
          description="Reading the data with swift")
    def _ask(self, query: SwiftDataQuery) -> None:
        from backend.data.files import hostile_dataset
        from backend.data.swift_view import ask_report, request_for
        from backend.oracle import OracleCancelled

        request = request_for(query.profile, query.base_dir, build_model=True)
        if not any(Path(ref.partition("#")[0]).exists() for ref in request.refs):
            self.post_message(self.Reported(query, None, "swift: no local dataset to read (hub datasets are "
                                                         "read by swift at launch)"))
            return
        problem = hostile_dataset(request.refs)  # a FIFO would block swift (and the cache key's read) forever
        if problem:
            self.post_message(self.Reported(query, None, f"swift: not read: {problem}"))
            return
        worker = get_current_worker()
        try:
            report = ask_report(request, progress=lambda line: self.post_message(self.Progress(query, line)),
                                cancelled=lambda: worker.is_cancelled)
        except OracleCancelled:
            return  # the query changed or the screen closed: the child is stopped, nothing to show
        self.post_message(self.Reported(query, report))

    @on(Progress)
    def _progress(self, event: Progress) -> None:
        if event.question == self.question and self.report is None:
            self._status(f"swift: {event.line}")

    @on(Reported)
    def _reported(self, event: Reported) -> None:
        if event.question != self.question:
            return
        if event.report is None:
            self._status(event.note)
            return
        self.report = event.report
        text = Text("swift's own report", style="bold underline")
        text.append("\n")
        text.append_text(report_text(event.report))
        text.rstrip()
        self.query_one("#swift-report", Static).update(text)
        self._show_row(self.row)

    def watch_row(self, row: int) -> None:
        if self.report is not None:
            self._show_row(row)

    def action_row(self, delta: int) -> None:
        self.row = max(1, self.row + delta)

    def _show_row(self, row: int) -> None:
        view = self.query_one(TrainedTokenView)
        datasets = (self.report or {}).get("datasets", [])
        views = datasets[0].get("views", []) if datasets else []
        known = next((v for v in views if v.get("row") == row), None)
        if known is not None:
            view.answer = known
            return
        if not datasets or datasets[0].get("status") != "ok" or not datasets[0].get("encoded"):
            view.answer = None
            view.note = ""  # nothing encoded (swift needs model_type / template): the report says why
            return
        view.answer = None
        view.note = f"row {row}: asking swift…"
        if self.question is not None:
            self._ask_row(self.question, row)

    @work(thread=True, exclusive=True, group="swift-row", exit_on_error=False, description="Rendering a row")
    def _ask_row(self, query: SwiftDataQuery, row: int) -> None:
        from backend.data.swift_view import ask_row, request_for
        from backend.oracle import OracleCancelled

        worker = get_current_worker()
        try:
            answer = ask_row(request_for(query.profile, query.base_dir, build_model=True), row,
                             cancelled=lambda: worker.is_cancelled)
        except OracleCancelled:
            return
        self.post_message(self.RowShown(query, row, answer))

    @on(RowShown)
    def _row_shown(self, event: RowShown) -> None:
        if event.question == self.question and event.row == self.row:
            self.query_one(TrainedTokenView).answer = event.answer
