"""The run queue (#25): waiting runs in the order they start, why each waits, and the keys to reorder,
pause, resume and remove them. Read by a thread worker on a timer (the UI thread reads no file); every
change goes through backend/queue (under the queue lock: safe while the keeper runs)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from backend.core.safe_text import visible
from backend.queue.admission import reasons
from backend.queue.changes import change
from backend.queue.eta import notes, start_estimates
from backend.queue.keeper import ensure_keeper, keeper_pid
from backend.queue.store import Entry, QueueDamaged, QueueFile, QueueRefused, read_queue
from backend.queue.sweep import sweep_runs
from tui.modals.dialogs import ConfirmModal

# when it starts before why: at 80 columns the last column is the one cut, and the highlighted entry's whole
# reason is written out under the table (wrapped) anyway
COLUMNS = (("n", "#"), ("id", "id"), ("name", "name"), ("state", "state"), ("starts", "starts (estimate)"),
           ("why", "why it waits / run"))
LOADING = "loading…"
EMPTY = "The queue is empty: F5 in the workspace offers \"Queue\", or `workbench queue add PROFILE`."


class QueueScreen(Screen[None]):
    CSS_PATH = "queue.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="queue-back", tooltip="Close the queue"),
        Binding("u", "move('up')", "Up", id="queue-up", tooltip="Start the entry under the cursor earlier"),
        Binding("n", "move('down')", "Down", id="queue-down", tooltip="Start the entry under the cursor later"),
        Binding("p", "pause", "Pause/resume", id="queue-pause", tooltip="Hold the entry, or let it wait again"),
        Binding("x", "remove", "Remove", id="queue-rm", tooltip="Remove a waiting or paused entry (asks first)"),
        Binding("c", "compare_sweep", "Compare sweep", id="queue-compare",
                tooltip="Compare the runs of the sweep of the entry under the cursor, ranked by their best checkpoint"),
    ]

    class Loaded(Message, bubble=False):
        def __init__(self, queue: QueueFile | None, why: dict[str, str], head: str,
                     starts: dict[str, str] | None = None, notes: list[str] | None = None) -> None:
            super().__init__()
            self.queue, self.why, self.head = queue, why, head
            self.starts, self.notes = starts or {}, notes or []

    def __init__(self, refresh_interval: float = 2.0) -> None:
        super().__init__(id="queue-screen")
        self.refresh_interval = refresh_interval
        self.entries: list[Entry] = []
        self.why: dict[str, str] = {}  # entry id -> why it waits, as shown
        self.loads = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="queue-head", markup=False)
        yield DataTable(id="queue-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="queue-why", markup=False)
        yield Static(LOADING, id="queue-empty", markup=False)  # never "empty" before the first read
        yield Static("", id="queue-notes", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.title, self.sub_title = "queue", "runs that wait their turn"
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.set_interval(self.refresh_interval, self.action_reload)
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="queue-load", exit_on_error=False, description="Reading the queue")
    def _load(self) -> None:
        try:
            queue = read_queue()
        except QueueDamaged as err:
            self.post_message(self.Loaded(None, {}, str(err)))
            return
        pid = keeper_pid()
        pending = len(queue.pending())
        head = f"{pending} pending, {len(queue.entries) - pending} done; " + \
            (f"keeper running (pid {pid})" if pid else "no keeper running")
        why = reasons(queue, psutil.virtual_memory().available)
        now = time.time()
        starts = start_estimates(queue, now=now, why=why)
        self.post_message(self.Loaded(queue, why, head, {k: s.text(now) for k, s in starts.items()}, notes(starts)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.loads += 1
        self.query_one("#queue-head", Static).update(visible(message.head))
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        queue = message.queue
        self.entries = [*queue.pending(), *(e for e in queue.entries if not e.pending)] if queue else []
        for number, entry in enumerate(self.entries, 1):
            name = visible(entry.name) + (f" #{entry.attempt}" if entry.attempt > 1 else "")
            table.add_row(str(number), entry.id, name, entry.state, message.starts.get(entry.id, "-"),
                          visible(message.why.get(entry.id, "")), key=entry.id)
        self.why = {entry.id: visible(message.why.get(entry.id, "")) for entry in self.entries}
        if self.entries:
            table.move_cursor(row=min(row, len(self.entries) - 1))
        empty = self.query_one("#queue-empty", Static)
        empty.update(EMPTY)
        empty.display = not self.entries
        self.query_one("#queue-notes", Static).update("\n".join(visible(n) for n in message.notes))
        self._show_why()

    @on(DataTable.RowHighlighted, "#queue-table")
    def _show_why(self) -> None:
        """The highlighted entry's reason in full, wrapped: the table's last column is cut in a narrow terminal."""
        table = self.query_one(DataTable)
        entry = self.entries[table.cursor_row] if 0 <= table.cursor_row < len(self.entries) else None
        why = self.why.get(entry.id, "") if entry else ""
        widget = self.query_one("#queue-why", Static)
        widget.update(f"{entry.id}: {why}" if entry and why else "")
        widget.display = bool(entry and why)

    def _selected(self) -> Entry | None:
        table = self.query_one(DataTable)
        if not self.entries or table.cursor_row >= len(self.entries):
            self.notify("No entry under the cursor.", severity="warning")
            return None
        return self.entries[table.cursor_row]

    def action_move(self, where: str) -> None:
        entry = self._selected()
        if entry is not None:
            self._change(entry.id, where)

    def action_pause(self) -> None:
        entry = self._selected()
        if entry is not None:
            self._change(entry.id, "resume" if entry.state == "paused" else "pause")

    def action_remove(self) -> None:
        entry = self._selected()
        if entry is None:
            return
        body = f"Remove {entry.id} ({visible(entry.name)}) from the queue? Its run, if any, stays." + (
            f" Its SLURM job {entry.slurm_job_id} is cancelled (scancel {entry.slurm_job_id})." if entry.slurm_job_id
            else "")

        def answered(yes: bool | None) -> None:
            if yes:
                self._change(entry.id, "rm")
        self.app.push_screen(ConfirmModal("Remove from the queue", body, "Remove"), answered)

    def action_compare_sweep(self) -> None:
        entry = self._selected()
        if entry is None:
            return
        if not entry.sweep_id:
            self.notify(f"{visible(entry.name)} is not part of a sweep", severity="warning", markup=False)
            return
        self._open_sweep(entry.sweep_id)

    @work(thread=True, exclusive=True, group="queue-sweep", exit_on_error=False, description="Finding the sweep")
    def _open_sweep(self, sweep_id: str) -> None:
        open_sweep(self.app, sweep_id)

    @work(thread=True, exclusive=True, group="queue-change", exit_on_error=False, description="Changing the queue")
    def _change(self, ref: str, what: str) -> None:
        try:
            change(ref, what)
            if what == "resume":
                ensure_keeper()
        except (QueueRefused, QueueDamaged) as err:
            self.app.notify(str(err), title=f"Queue {what} refused", severity="warning", timeout=10, markup=False)
        self._load()


def open_sweep(app: Any, ref: str | None = None, run_dir: str | None = None) -> None:
    """From a thread worker: the compare view on a sweep's runs (by sweep id, or the sweep that started
    `run_dir`), or a notice saying why not."""
    from tui.screens.compare import CompareScreen

    try:
        name, runs = sweep_runs(ref, run_dir=run_dir)
    except (QueueRefused, QueueDamaged) as err:
        app.notify(str(err), title="No sweep to compare", severity="warning", markup=False)
        return
    app.call_from_thread(app.push_screen, CompareScreen([Path(r) for r in runs], sweep=name))
