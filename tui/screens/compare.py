"""Compare runs: the train loss of two or more runs on one plot (raw or EMA), each from its events file.

Opened on a sweep's runs (the Queue screen's `c`, the runs list's `w`), the table ranks them by their checkpoint
scoreboard's best checkpoint (backend.queue.sweep.rank_runs) and says each one's best."""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header

from backend.core.safe_text import visible
from backend.queue.sweep import Ranked, rank_runs
from backend.series import MetricsStore
from backend.series.summary import load_run_store
from tui.safe import plain
from tui.widgets.metric_plots import CompareLossPlot
from tui.widgets.units import number, step_of
from tui.worker_failures import WorkerFailures


class CompareScreen(WorkerFailures, Screen[None]):
    CSS_PATH = "compare.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="compare-back", tooltip="Back to the runs list"),
        Binding("s", "toggle('smoothing')", "Smooth", id="compare-smooth", tooltip="EMA-smoothed or raw loss"),
        Binding("l", "toggle('log_scale')", "Log y", id="compare-log", tooltip="Logarithmic loss axis"),
    ]

    smoothing: reactive[bool] = reactive(True, init=False)
    """Overlay the EMA of each run's loss instead of the raw loss."""
    log_scale: reactive[bool] = reactive(False, init=False)
    """Logarithmic y axis."""

    class Loaded(Message, bubble=False):
        def __init__(self, stores: dict[Path, MetricsStore], ranking: list[Ranked] | None = None) -> None:
            super().__init__()
            self.stores = stores
            self.ranking = ranking

    def __init__(self, run_dirs: list[Path], *, sweep: str | None = None, name: str | None = None,
                 id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self.run_dirs = [Path(d) for d in run_dirs]
        self.sweep = sweep  # a sweep's name: its runs ranked by the scoreboard's best checkpoint
        self.stores: dict[Path, MetricsStore] = {}
        self.ranking: list[Ranked] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield CompareLossPlot(id="compare-plot")
        yield DataTable(id="compare-table", cursor_type="none")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"compare {len(self.run_dirs)} runs" + (f" of sweep {visible(self.sweep)}" if self.sweep else "")
        self.sub_title = "train loss"
        table = self.query_one(DataTable)
        for label in (("rank",) if self.sweep else ()) + ("run", "step", "last loss", "min loss", "last eval") + \
                (("best checkpoint (scoreboard)",) if self.sweep else ()):
            table.add_column(label, key=label)
        self._load()

    @work(thread=True, exclusive=True, group="compare-load", exit_on_error=False, description="Reading events")
    def _load(self) -> None:
        ranking = rank_runs([str(d) for d in self.run_dirs]) if self.sweep else None
        self.post_message(self.Loaded({d: load_run_store(d / "events.jsonl") for d in self.run_dirs}, ranking))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.stores = message.stores
        self.ranking = message.ranking or []
        table = self.query_one(DataTable)
        table.clear()
        best = {Path(r.run_dir).resolve(): (place, r) for place, r in enumerate(self.ranking, 1)}
        order = sorted(self.stores, key=lambda d: best.get(d.resolve(), (len(best) + 1, None))[0])
        for run_dir in order:
            store = self.stores[run_dir]
            loss, low, numbers = store.series["loss"], store.series["loss"].minimum(), store.throughput()
            evals = store.eval_loss.last
            cells = [plain(run_dir.name), step_of(numbers.step, numbers.max_steps),
                     number(loss.last[1]) if loss.last else "-", number(low[1]) if low else "-",
                     number(evals[1]) if evals else "-"]
            if self.sweep:
                place, ranked = best.get(run_dir.resolve(), (None, None))
                cells = [str(place) if ranked and ranked.value is not None else "-", *cells,
                         plain(ranked.text) if ranked else "-"]
            table.add_row(*cells)
        self._draw()

    def retry(self) -> None:
        self.sub_title = "train loss"
        self._load()

    def _draw(self) -> None:
        plot = self.query_one(CompareLossPlot)
        width = max(60, min(400, plot.size.width))
        curves = {}
        for run_dir, store in self.stores.items():
            series = store.loss_smooth if self.smoothing else store.series["loss"]
            curves[run_dir.name] = series.points(None, width)
        plot.show(curves, log_scale=self.log_scale, title="EMA of the train loss" if self.smoothing else "train loss")

    def watch_smoothing(self) -> None:
        self._draw()

    def watch_log_scale(self) -> None:
        self._draw()
