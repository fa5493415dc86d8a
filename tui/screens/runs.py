"""Every run the user has, from any directory: running ones first. Open, stop, resume, delete, compare.

The list is read by a thread worker on a timer, through a `SummaryCache` (backend/runs/summaries.py:
a run is read again only when its files changed or while it is active; reading also reconciles the
state of runs whose processes vanished), and arrives as one `Loaded` message. The timer only starts
the worker: the UI thread reads no file. Quitting the app or leaving this screen never stops a run:
runs live in their own sessions.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from backend.checkpoints.pins import pins_lost_on_delete
from backend.core.safe_text import visible
from backend.rundir.layout import RunFolder
from backend.runs.delete import delete_run
from backend.runs.resume import resume_run
from backend.runs.stop import stop_run
from backend.runs.summaries import RunSummary, SummaryCache
from tui.modals.dialogs import ConfirmModal
from tui.safe import plain
from tui.widgets.units import duration, number, step_of
from tui.worker_failures import WorkerFailures, failure_text

COLUMNS = (("mark", " "), ("status", "status"), ("run", "run"), ("profile", "profile"), ("step", "step"),
           ("loss", "loss"), ("elapsed", "elapsed"), ("eta", "ETA"), ("attempt", "attempt"))
NAME_CHARS = 40  # a run id or profile name is cut to this (a 387-character name would push the other columns off)
KEEP_GOING = "Runs live in their own sessions: quitting the app or losing the terminal never stops one."
STATUS_STYLE = {"running": "bold green", "starting": "green", "stopping": "yellow", "finished": "cyan",
                "failed": "bold red", "stopped": "yellow", "unknown": "magenta",
                "damaged": "bold magenta"}


def _on_yes(act: Callable[[], object]) -> Callable[[bool | None], None]:
    """A confirm modal's callback: act on a yes (what the act returns, a worker, is no answer to the modal)."""
    def answered(yes: bool | None) -> None:
        if yes:
            act()
    return answered


LOADING = "loading…"
NO_RUNS = "No runs yet: launch one from the workspace (F2) or with `workbench run`."


class RunsScreen(WorkerFailures, Screen[None]):
    CSS_PATH = "runs.tcss"
    BINDINGS = [
        Binding("enter", "open", "Open", id="runs-open", tooltip="Monitor the run under the cursor"),
        Binding("space", "mark", "Mark", id="runs-mark", tooltip="Mark runs to compare their loss"),
        Binding("c", "compare", "Compare", id="runs-compare", tooltip="Overlay the loss of the marked runs"),
        Binding("w", "compare_sweep", "Sweep", id="runs-sweep",
                tooltip="Compare every run of the sweep this run belongs to, ranked by their best checkpoint"),
        Binding("s", "stop", "Stop", id="runs-stop", tooltip="Stop the run under the cursor (asks first)"),
        Binding("r", "resume", "Resume", id="runs-resume", tooltip="Resume a stopped or failed run from its last checkpoint"),
        Binding("d", "delete", "Delete", id="runs-delete", tooltip="Delete a finished, failed or stopped run (asks first)"),
        Binding("f5", "reload", "Reload", show=False, id="runs-reload", tooltip="Read the runs again now"),
    ]

    class Loaded(Message, bubble=False):
        """A fresh list of runs, newest state first."""

        def __init__(self, summaries: list[RunSummary], problems: list[str]) -> None:
            super().__init__()
            self.summaries = summaries
            self.problems = problems  # runs that could not be read (the others are listed)

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, RunsScreen.Loaded)

    def __init__(self, refresh_interval: float = 2.0, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self.refresh_interval = refresh_interval
        self.summaries: dict[str, RunSummary] = {}
        self.marked: set[str] = set()
        self.loads = 0
        self.problems: list[str] = []
        self._cache = SummaryCache()

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static(LOADING, id="runs-empty", markup=False)  # never "No runs yet" before the first read
        yield Static(KEEP_GOING, id="runs-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.title = "runs"
        self.sub_title = "runs keep going when you close the app"
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.set_interval(self.refresh_interval, self._timed_reload)
        self.action_reload()

    def _timed_reload(self) -> None:
        # under a monitor or chat, a repaint of this screen would repaint the screen on top (bytes over SSH)
        if self.is_active:
            self.action_reload()

    def on_screen_resume(self) -> None:
        if self.loads:
            self.action_reload()

    # ------------------------------------------------------------ loading

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="runs-load", exit_on_error=False, description="Listing runs")
    def _load(self) -> None:
        loaded = self._cache.reload()
        self.post_message(self.Loaded(loaded.summaries, loaded.problems))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.loads += 1
        table = self.query_one(DataTable)
        current = self._cursor_key()
        before = self.summaries
        self.summaries = {str(s.run.path): s for s in message.summaries}
        self.marked &= set(self.summaries)
        if list(before) == list(self.summaries):  # same runs, same order: repaint only the cells that changed
            self._update_cells(table, before)
        else:
            table.clear()
            for key, summary in self.summaries.items():
                table.add_row(*self._cells(summary), key=key)
            if current in self.summaries:
                table.move_cursor(row=table.get_row_index(current))
        empty = self.query_one("#runs-empty", Static)
        empty.update(NO_RUNS)
        empty.display = not self.summaries
        self._show_problems(message.problems)

    def _update_cells(self, table: DataTable, before: dict[str, RunSummary]) -> None:
        """Every reload would otherwise repaint the whole table, over SSH too, even when nothing changed."""
        for key, summary in self.summaries.items():
            if before[key] is summary:
                continue  # kept by the cache: its files did not change
            old = self._cells(before[key])
            for (column, _), was, now in zip(COLUMNS, old, self._cells(summary), strict=True):
                if was != now:
                    table.update_cell(key, column, now)

    def _cells(self, summary: RunSummary) -> tuple[str | Text, ...]:
        state = summary.state
        status = plain(state.status, STATUS_STYLE.get(state.status, ""))  # names from files are never markup
        return ("●" if str(summary.run.path) in self.marked else " ", status, _name(summary.run.run_id),
                _name(state.profile_name),
                step_of(summary.step, summary.max_steps), number(summary.loss),
                duration(summary.elapsed_seconds), duration(summary.eta_seconds) if state.is_active else "-",
                Text(summary.attempt))  # an OOM retry's link ("attempt 2 of RUN, half micro-batch"), said as is

    def _show_problems(self, problems: list[str]) -> None:
        """Runs that could not be read, said in place (and once as a toast, not every reload)."""
        if problems == self.problems or self.failed:
            return
        new = [p for p in problems if p not in self.problems]
        self.problems = problems
        self.query_one("#runs-note", Static).update(_problems_text(problems) if problems else KEEP_GOING)
        if new:
            self.notify("\n".join(new), title="Some runs could not be read", severity="warning")

    def show_failure(self, message: str) -> None:
        self.query_one("#runs-note", Static).update(failure_text(message))

    def retry(self) -> None:
        self.query_one("#runs-note", Static).update(_problems_text(self.problems) if self.problems else KEEP_GOING)
        self.action_reload()

    def _cursor_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def _selected(self) -> RunSummary | None:
        key = self._cursor_key()
        return self.summaries.get(key) if key else None

    # ------------------------------------------------------------ actions

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        summary = self._selected()
        if summary is not None:
            self.app.open_run(summary.run.path)  # type: ignore[attr-defined]

    def action_mark(self) -> None:
        key = self._cursor_key()
        if key is None:
            return
        self.marked ^= {key}
        table = self.query_one(DataTable)
        table.update_cell(key, "mark", "●" if key in self.marked else " ")

    def action_compare(self) -> None:
        from tui.screens.compare import CompareScreen

        chosen = [self.summaries[k].run.path for k in self.summaries if k in self.marked]
        if len(chosen) < 2:
            self.notify("mark two or more runs with Space, then press c", severity="warning")
            return
        self.app.push_screen(CompareScreen(chosen))

    def action_compare_sweep(self) -> None:
        summary = self._selected()
        if summary is not None:
            self._open_sweep(str(summary.run.path))

    @work(thread=True, exclusive=True, group="runs-sweep", exit_on_error=False, description="Finding the sweep")
    def _open_sweep(self, run_dir: str) -> None:
        from tui.screens.queue import open_sweep

        open_sweep(self.app, run_dir=run_dir)

    def action_stop(self) -> None:
        summary = self._selected()
        if summary is None:
            return
        if not summary.state.is_active:
            self.notify(f"{summary.run.run_id} is {summary.state.status}; nothing to stop", severity="warning")
            return
        body = (f"Stop {summary.run.run_id}? Every process of the run gets SIGINT, then SIGTERM, then SIGKILL. "
                "It can be resumed later from its last checkpoint.")
        self.app.push_screen(ConfirmModal("Stop the run", body, "Stop"),
                             _on_yes(lambda: self._stop(summary.run)))

    @work(thread=True, group="runs-act", exit_on_error=False, description="Stopping a run")
    def _stop(self, run: RunFolder) -> None:
        lines = stop_run(run)
        self.app.notify("\n".join(lines), title=f"Stopped {run.run_id}")
        self.app.call_from_thread(self._load)

    def action_resume(self) -> None:
        """Asks first, naming the run: the list re-sorts under the cursor, so the row under it may have changed."""
        summary = self._selected()
        if summary is None:
            return
        if summary.state.is_active:
            self.notify(f"{summary.run.run_id} is {summary.state.status}; nothing to resume", severity="warning")
            return
        body = (f"Resume {summary.run.run_id} (profile {summary.state.profile_name}, {summary.state.status}) "
                "from its last complete checkpoint? It starts training again.")
        self.app.push_screen(ConfirmModal("Resume the run", body, "Resume", danger=False),
                             _on_yes(lambda: self._resume(summary.run)))

    @work(thread=True, group="runs-act", exit_on_error=False, description="Resuming a run")
    def _resume(self, run: RunFolder) -> None:
        try:
            resume_run(run)
        except (ValueError, OSError) as err:
            self.app.notify(str(err), title="Cannot resume", severity="error")
            return
        self.app.notify(f"resumed from {run.read_state().resumed_from}", title=run.run_id)
        self.app.call_from_thread(self._load)

    def action_delete(self) -> None:
        summary = self._selected()
        if summary is None:
            return
        if summary.state.is_active:
            self.notify(f"{summary.run.run_id} is {summary.state.status}: stop it before deleting", severity="error")
            return
        pinned = pins_lost_on_delete(summary.run)
        body = f"Delete {summary.run.run_id} and everything in its folder?\n{summary.run.path}" + \
            (f"\n{pinned[0].upper()}{pinned[1:]}" if pinned else "")
        self.app.push_screen(ConfirmModal("Delete the run", body, "Delete"),
                             _on_yes(lambda: self._delete(summary.run)))

    @work(thread=True, group="runs-act", exit_on_error=False, description="Deleting a run")
    def _delete(self, run: RunFolder) -> None:
        try:
            delete_run(run)
        except (ValueError, OSError) as err:
            self.app.notify(str(err), title="Not deleted", severity="error")
            return
        self.app.notify(f"deleted {run.run_id}")
        self.app.call_from_thread(self._load)


def _name(value: object) -> Text:
    """A name from a file as written, cut to its column."""
    return Text(visible(value, limit=NAME_CHARS))


def _problems_text(problems: list[str]) -> Text:
    text = Text("⚠ ", style="yellow")
    text.append(f"{len(problems)} run(s) could not be read: " + "; ".join(problems), style="yellow")
    return text
