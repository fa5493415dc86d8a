"""The monitor's checkpoint scoreboard (key c): one row per checkpoint, drawn from the backend's rows
(backend.runs.scoreboard, the same cells as `workbench checkpoints RUN`), the best marked `*`.

Enter chats with the checkpoint under the cursor, `m` merges it, `p` pins or unpins it. The run folder is
read in a thread worker, when the panel is shown and when the monitor read something new; text from the
folder is never markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from backend.runs.layout import RunFolder
from backend.runs.scoreboard import Scoreboard, ScoreboardError, cells, headers, pin, scoreboard, summary, unpin
from backend.safe_text import visible, visible_lines
from tui.worker_failures import WorkerFailures, failure_text


class ScoreboardPanel(WorkerFailures, Vertical):
    BINDINGS = [
        Binding("m", "merge_row", "Merge it", id="scoreboard-merge",
                tooltip="Merge the checkpoint under the cursor into its base model (asks first)"),
        Binding("p", "pin_row", "Pin / unpin", id="scoreboard-pin",
                tooltip="Pin the checkpoint under the cursor (a copy save_total_limit's rotation cannot delete), "
                        "or unpin it"),
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
        .notes { height: auto; max-height: 2; color: $warning; }
        DataTable { height: 1fr; }
    }
    """

    @dataclass
    class Loaded(Message, bubble=False):
        """A worker read the scoreboard."""

        board: Scoreboard

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
        self.loads = 0  # boards drawn (tests wait on it)
        self._headers: tuple[str, ...] = ()
        self._cells: dict[str, tuple[bool, tuple[str, ...]]] = {}  # the table's rows as drawn, by step

    def compose(self) -> ComposeResult:
        yield Static("reading the checkpoints…", classes="summary", markup=False)
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=True)
        yield table
        yield Static("", classes="notes", markup=False)

    def on_mount(self) -> None:
        self.border_title = "Checkpoints  (enter: chat · m: merge · p: pin)"

    # ------------------------------------------------------------ reading

    def reload(self) -> None:
        """Read the run folder again (in a worker) and redraw."""
        self._read()

    @work(thread=True, exclusive=True, group="scoreboard-read", exit_on_error=False,
          description="Reading the checkpoint scoreboard")
    def _read(self) -> None:
        self.post_message(self.Loaded(scoreboard(RunFolder(self.run_dir))))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        board = message.board
        self.board = board
        self._fill(board)
        self.query_one(".summary", Static).update(Text(summary(board)))
        notes = board.problems + ([f"deleted since saved (rotation): step {', '.join(map(str, board.gone_steps))}"]
                                  if board.gone_steps else [])
        self.query_one(".notes", Static).update(Text(visible_lines("\n".join(notes))))
        self.loads += 1

    def _fill(self, board: Scoreboard) -> None:
        """Only what changed: a new checkpoint is a row added, a new best two rows' cells; the whole table is
        rebuilt only when rows went or came out of order (a redraw of a live run costs what changed)."""
        table: DataTable[Text] = self.query_one(DataTable)
        names = headers(board)
        if names != self._headers:
            table.clear(columns=True)
            for index, name in enumerate(names):
                table.add_column(name, key=f"c{index}")
            self._headers, self._cells = names, {}
        rows = {str(row.step): (row.best, cells(board, row)) for row in board.rows}
        if list(rows)[:len(self._cells)] != list(self._cells):
            table.clear()
            self._cells = {}
        for key, (best, texts) in rows.items():
            before = self._cells.get(key)
            if before is None:
                table.add_row(*(_cell(text, best) for text in texts), key=key)
            elif before != (best, texts):
                for index, text in enumerate(texts):
                    if before[0] != best or before[1][index] != text:
                        table.update_cell(key, f"c{index}", _cell(text, best))
        self._cells = rows

    def selected_step(self) -> int | None:
        if self.board is None or not self.board.rows:
            return None
        row = self.query_one(DataTable).cursor_row
        return self.board.rows[row].step if 0 <= row < len(self.board.rows) else None

    # ------------------------------------------------------------ actions

    @on(DataTable.RowSelected)
    def _chat(self, event: DataTable.RowSelected) -> None:
        event.stop()
        step = self.selected_step()
        if step is not None:
            self.post_message(self.ChatAsked(step))

    def action_merge_row(self) -> None:
        step = self.selected_step()
        if step is not None:
            self.post_message(self.MergeAsked(step))

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
        except ScoreboardError as err:
            self.app.notify(str(err), title="Not changed", severity="error", timeout=10, markup=False)
            return
        self.app.notify(said, title="Unpinned" if unpin_it else "Pinned", markup=False)
        self._read()

    # ------------------------------------------------------------ failures

    def show_failure(self, message: str) -> None:
        self.query_one(".summary", Static).update(failure_text(message))

    def retry(self) -> None:
        self._read()


def _cell(text: str, best: bool) -> Text:
    """A cell as drawn: never markup; the best row in bold. Only the state (a reason naming a folder) can
    hold characters from outside; the rest are numbers and checkpoint-N names."""
    return Text(visible(text) if text.startswith("incomplete") else text, style="bold" if best else "")
