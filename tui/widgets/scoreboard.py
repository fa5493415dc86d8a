"""The monitor's checkpoint scoreboard (key c): one row per checkpoint, drawn from the backend's rows
(backend.checkpoints.scoreboard: the same lines as `workbench checkpoints RUN` prints), the best marked `*`.

Enter chats with the checkpoint under the cursor, `m` merges it, `x` exports it (a choice of formats; the
export and its parity check are one job of the run, backend.ship.pipeline, which goes on when the app quits: its
line shows its progress read from its record, a second `x` while it runs names it, `X` stops it), `p` pins or
unpins it. The run folder is
read in a thread worker, when the panel is shown and when the monitor read something new; text from the
folder is never markup. The rows are drawn line by line (Textual's line API): a frame costs the rows on
screen, not the hundred a long run may have (bench/scoreboard.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from backend.checkpoints.board_text import summary, table_lines
from backend.checkpoints.pins import PinRefused, pin, unpin
from backend.checkpoints.scoreboard import Scoreboard, scoreboard
from backend.core.safe_text import visible, visible_lines
from backend.rundir.layout import RunFolder
from tui.worker_failures import WorkerFailures, failure_text


class ScoreRows(ScrollView, can_focus=True):
    """The table's rows with a cursor, drawn only where they are on screen."""

    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False, id="score-rows-up", tooltip="The checkpoint above"),
        Binding("down", "move(1)", "Down", show=False, id="score-rows-down", tooltip="The checkpoint below"),
        Binding("pageup", "move(-10)", show=False, id="score-rows-pageup", tooltip="Ten checkpoints up"),
        Binding("pagedown", "move(10)", show=False, id="score-rows-pagedown", tooltip="Ten checkpoints down"),
        Binding("home", "move(-1000000)", show=False, id="score-rows-home", tooltip="The first checkpoint"),
        Binding("end", "move(1000000)", show=False, id="score-rows-end", tooltip="The last checkpoint"),
        Binding("enter", "choose", "Chat with it", id="score-rows-chat",
                tooltip="Chat with the checkpoint under the cursor"),
    ]
    COMPONENT_CLASSES = {"score-rows--cursor"}
    DEFAULT_CSS = """
    ScoreRows {
        height: 1fr;
        overflow-x: hidden;
        & > .score-rows--cursor { background: $accent 30%; }
        &:focus > .score-rows--cursor { background: $accent 60%; }
    }
    """

    cursor: reactive[int] = reactive(0, init=False)
    """The row under the cursor."""

    @dataclass
    class Chosen(Message):
        """Enter on a row."""

        index: int

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.lines: list[str] = []
        self.best: int | None = None

    def show(self, lines: list[str], best: int | None) -> None:
        if lines == self.lines and best == self.best:
            return
        self.lines, self.best = lines, best
        self.virtual_size = Size(self.size.width, len(lines))
        self.cursor = max(0, min(self.cursor, len(lines) - 1))
        self.refresh()

    def watch_cursor(self) -> None:
        top, height = self.scroll_offset.y, self.scrollable_content_region.height
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif height and self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False)
        self.refresh()

    def action_move(self, by: int) -> None:
        if self.lines:
            self.cursor = max(0, min(len(self.lines) - 1, self.cursor + by))

    def action_choose(self) -> None:
        if self.lines:
            self.post_message(self.Chosen(self.cursor))

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self.lines):
            return Strip.blank(width, base)
        style = base + Style(bold=True) if index == self.best else base
        if index == self.cursor:
            style += self.get_component_rich_style("score-rows--cursor")
        return Strip([Segment(self.lines[index].ljust(width), style)]).crop(0, width)


class ScoreboardPanel(WorkerFailures, Vertical):
    RELOAD_SECONDS = 5.0  # while shown: golden answers and eval scores that land after training ends

    BINDINGS = [
        Binding("m", "merge_row", "Merge it", id="scoreboard-merge",
                tooltip="Merge the checkpoint under the cursor into its base model (asks first)"),
        Binding("x", "export_row", "Export it", id="scoreboard-export",
                tooltip="Export the checkpoint under the cursor (merged, Ollama, GGUF, 4-bit) and check that it "
                        "answers like the checkpoint"),
        Binding("X", "stop_export", "Stop the export", id="scoreboard-stop-export",
                tooltip="Stop the run's running export job (its merge or parity job with it)"),
        Binding("p", "pin_row", "Pin / unpin", id="scoreboard-pin",
                tooltip="Pin the checkpoint under the cursor (a copy save_total_limit's rotation cannot delete), "
                        "or unpin it"),
        Binding("g", "golden_view", "Golden answers", id="scoreboard-golden",
                tooltip="The golden prompts' answers per prompt: base model, each checkpoint, the reference"),
        Binding("e", "eval_row", "Evaluate it", id="scoreboard-eval",
                tooltip="swift eval of the checkpoint under the cursor and of the base model on the profile's "
                        "[eval] dataset, as a job (the scores appear in the swift eval column)"),
    ]
    DEFAULT_CSS = """
    ScoreboardPanel {
        display: none;
        height: 11;
        margin: 0 1;
        border: round $panel;
        border-title-color: $text-accent;
        &.-shown { display: block; }
        .summary { height: 1; color: $text-muted; }
        .header { height: 1; text-style: bold; }
        .notes { height: auto; max-height: 2; color: $warning; }
        .export { height: auto; max-height: 1; color: $text-accent; }
    }
    """

    @dataclass
    class Loaded(Message, bubble=False):
        """A worker read the scoreboard."""

        board: Scoreboard
        export: str = ""  # the run's newest export job, one line; "": none

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ScoreboardPanel.Loaded)

    @dataclass
    class ChatAsked(Message):
        """Enter on a row: chat with checkpoint-`step`."""

        step: int

    @dataclass
    class MergeAsked(Message):
        """`m` on a row: merge checkpoint-`step`."""

        step: int

    def __init__(self, run_dir: Path, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.run_dir = Path(run_dir)
        self.board: Scoreboard | None = None
        self.loads = 0  # boards read (tests wait on it)
        self.draws = 0  # boards drawn: a board equal to the one on screen is not drawn again

    def compose(self) -> ComposeResult:
        yield Static("reading the checkpoints…", classes="summary", markup=False)
        yield Static("", classes="header", markup=False)
        yield ScoreRows()
        yield Static("", classes="notes", markup=False)
        yield Static("", classes="export", markup=False)

    def on_mount(self) -> None:
        self.border_title = "Checkpoints  (enter: chat · m: merge · x: export · p: pin · g: golden · e: eval)"
        self.set_interval(self.RELOAD_SECONDS, self._reload_if_shown)

    def _reload_if_shown(self) -> None:
        """Golden answers and eval scores land after training ends, when no event makes the monitor redraw:
        while the panel is shown it reads the folder again now and then (nothing is drawn when unchanged)."""
        if self.has_class("-shown"):
            self.reload()

    def focus_rows(self) -> None:
        self.query_one(ScoreRows).focus()

    # ------------------------------------------------------------ reading

    def reload(self) -> None:
        """Read the run folder again (in a worker) and redraw."""
        self._read()

    @work(thread=True, exclusive=True, group="scoreboard-read", exit_on_error=False,
          description="Reading the checkpoint scoreboard")
    def _read(self) -> None:
        from backend.ship.pipeline import newest_export, status_line

        run = RunFolder(self.run_dir)
        job = newest_export(run)
        self.post_message(self.Loaded(scoreboard(run), status_line(job) if job is not None else ""))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        board = message.board
        self.loads += 1
        self.query_one(".export", Static).update(Text(visible(message.export)))
        if board == self.board:
            return
        self.draws += 1
        keep = self.selected_step()
        self.board = board
        header, *rows = [visible(line) for line in table_lines(board)]
        self.query_one(".header", Static).update(Text(header))
        table = self.query_one(ScoreRows)
        best = next((i for i, row in enumerate(board.rows) if row.best), None)
        table.show(rows, best)
        steps = [row.step for row in board.rows]
        if keep is not None and keep in steps:
            table.cursor = steps.index(keep)
        self.query_one(".summary", Static).update(Text(summary(board)))
        notes = board.problems + ([f"deleted since saved (rotation): step {', '.join(map(str, board.gone_steps))}"]
                                  if board.gone_steps else [])
        self.query_one(".notes", Static).update(Text(visible_lines("\n".join(notes))))

    def selected_step(self) -> int | None:
        if self.board is None or not self.board.rows:
            return None
        index = self.query_one(ScoreRows).cursor
        return self.board.rows[index].step if 0 <= index < len(self.board.rows) else None

    # ------------------------------------------------------------ actions

    @on(ScoreRows.Chosen)
    def _chat(self, event: ScoreRows.Chosen) -> None:
        event.stop()
        step = self.selected_step()
        if step is not None:
            self.post_message(self.ChatAsked(step))

    def action_merge_row(self) -> None:
        step = self.selected_step()
        if step is not None:
            self.post_message(self.MergeAsked(step))

    def action_export_row(self) -> None:
        step = self.selected_step()
        if step is None:
            return
        from backend.ship.export_model import FORMATS
        from tui.modals.dialogs import Choice, ConfirmScreen

        choices = [Choice(fmt, fmt, "primary" if fmt == "merged" else "default", key=fmt) for fmt in FORMATS]
        body = ("Export it as a merged 16-bit model, an Ollama Modelfile (with the training template), GGUF "
                "(needs llama.cpp's converter) or 4-bit (needs a GPU). Its answers are then compared with the "
                "checkpoint's (parity.json in the export's folder).")

        def chosen(fmt: str | None) -> None:
            if fmt is not None:
                self._export(step, fmt)

        self.app.push_screen(ConfirmScreen(f"Export checkpoint-{step}", body, choices, id="export-choice"), chosen)

    @work(thread=True, group="scoreboard-export", exit_on_error=False, description="Starting an export job")
    def _export(self, step: int, fmt: str) -> None:
        from backend.ship.export_model import ExportRefused
        from backend.ship.pipeline import ExportRunning, start_export_pipeline

        try:
            job, plan = start_export_pipeline(RunFolder(self.run_dir), fmt, step)
        except ExportRunning as err:
            self.app.notify(visible_lines(str(err)), title="Export running", severity="warning", timeout=20,
                            markup=False)
            return
        except ExportRefused as err:
            self.app.notify(visible_lines(str(err)), title="Not exported", severity="error", timeout=20, markup=False)
            return
        self.app.notify(visible_lines(f"job {job.job_id}: {plan.target}; it goes on if the app quits (X stops it)"),
                        title=f"Export to {fmt} started", markup=False, timeout=10)
        self._read()

    def action_stop_export(self) -> None:
        self._stop_export()

    @work(thread=True, group="scoreboard-export-stop", exit_on_error=False, description="Stopping the export")
    def _stop_export(self) -> None:
        from backend.jobs.job import stop_job
        from backend.ship.pipeline import running_export

        job = running_export(RunFolder(self.run_dir))
        if job is None:
            self.app.notify("no export of this run is running", title="Nothing stopped", markup=False)
            return
        state = stop_job(job)
        self.app.notify(visible(f"export job {job.job_id}: {state.status}"), title="Export stopped", markup=False)
        self._read()

    def action_pin_row(self) -> None:
        step = self.selected_step()
        if step is not None and self.board is not None:
            row = self.board.row(step)
            self._pin(step, unpin_it=bool(row and row.pinned))

    @work(thread=True, group="scoreboard-pin", exit_on_error=False, description="Pinning a checkpoint")
    def _pin(self, step: int, unpin_it: bool) -> None:
        run = RunFolder(self.run_dir)
        try:
            said = unpin(run, step) if unpin_it else pin(run, step)
        except PinRefused as err:
            self.app.notify(str(err), title="Not changed", severity="error", timeout=10, markup=False)
            return
        self.app.notify(said, title="Unpinned" if unpin_it else "Pinned", markup=False)
        self._read()

    def action_eval_row(self) -> None:
        step = self.selected_step()
        if step is not None:
            self._eval(step)

    @work(thread=True, group="scoreboard-eval", exit_on_error=False, description="Starting an eval job")
    def _eval(self, step: int) -> None:
        from backend.evaluation.job import EvalRefused, dataset_of_run, start_eval

        run = RunFolder(self.run_dir)
        try:
            job = start_eval(run, dataset_of_run(run), checkpoint=step)
        except EvalRefused as err:
            self.app.notify(str(err), title="Not evaluated", severity="error", timeout=20, markup=False)
            return
        self.app.notify(f"job {job.job_id}: {job.read_spec().description}; the scores appear in the swift eval "
                        "column when it ends", title="swift eval started", markup=False, timeout=10)

    def action_golden_view(self) -> None:
        self._golden()

    @work(thread=True, exclusive=True, group="scoreboard-golden", exit_on_error=False,
          description="Reading the golden answers")
    def _golden(self) -> None:
        from backend.golden.answers import read_golden, view_lines
        from tui.modals.golden import GoldenScreen

        run = RunFolder(self.run_dir)
        gone = self.board.gone_steps if self.board is not None else []
        lines = view_lines(read_golden(run, gone))
        self.app.call_from_thread(self.app.push_screen, GoldenScreen(f"Golden prompts of {run.run_id}", lines))

    # ------------------------------------------------------------ failures

    def show_failure(self, message: str) -> None:
        self.query_one(".summary", Static).update(failure_text(message))

    def retry(self) -> None:
        self._read()
