"""The monitor's panels: loss, learning rate · grad norm, loss scale (drawn from the run's
MetricsStore) and memory, in a grid.

State comes one way, bound from the screen (`data_bind`): what to draw (`smoothing`,
`log_scale`, `zoom`), which panel is shown alone (`shown_panel`), the low-bandwidth
sparklines, the store's `version` after a read and, while a backlog is read, `reading`
(the fraction read: the panels say so and draw nothing until it is read whole).
"""

from __future__ import annotations

import math
from typing import Any

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.reactive import reactive
from textual.widgets import Static

from backend.series import MetricsStore, Series
from tui.widgets.memory_panel import MemoryPanel
from tui.widgets.metric_plots import LossPlot, LossScalePlot, LrGradPlot, pixel_thin, round_limits
from tui.widgets.quiet import show_text, sparkline
from tui.widgets.units import number

PANELS = ("loss", "lr", "scale", "memory")
# keys of one panel, written on its border (the footer keeps the keys that act on the run)
PANEL_KEYS = {"loss": " · s smooth · l log · z zoom"}
TITLES = {"loss": "loss", "lr": "learning rate · grad norm", "scale": "loss scale (log2)", "memory": "memory"}
POINTS_ASKED = 4096  # points asked of the store before thinning them per pixel column


def scale_text(scale: float | None) -> str:
    if scale is None:
        return "-"
    exponent = math.log2(scale) if scale > 0 else 0.5
    return f"{scale:g} = 2^{int(exponent)}" if exponent.is_integer() else f"{scale:g}"


class MetricPanels(Grid):
    """Four panels; the three plot panels redraw from the store when a bound state changes."""

    # none repaints the grid: the plots and lines repaint only what they change (terminal traffic)
    smoothing: reactive[bool] = reactive(True, init=False, repaint=False)
    log_scale: reactive[bool] = reactive(False, init=False, repaint=False)
    zoom: reactive[int | None] = reactive(None, init=False, repaint=False)
    shown_panel: reactive[str] = reactive("", init=False, repaint=False)
    """The one panel shown alone ("" = all of them)."""
    low_bandwidth: reactive[bool] = reactive(False, init=False, repaint=False)
    version: reactive[int] = reactive(-1, init=False, repaint=False)
    """The store's version last read: a new one redraws."""
    reading: reactive[float | None] = reactive(None, init=False, repaint=False)
    alert_steps: reactive[tuple[int, ...]] = reactive((), init=False, repaint=False)
    """Steps of the run's alerts: a red line each on the loss plot."""

    def __init__(self, store: MetricsStore, forecast: dict | None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self._forecast = forecast

    def compose(self) -> ComposeResult:
        with Vertical(id="loss-panel", classes="panel"):
            yield Static("waiting for the first logged step", id="loss-summary", classes="summary", markup=False)
            yield Static("", id="loss-spark", classes="spark", markup=False)
            yield LossPlot(id="loss-plot")
        with Vertical(id="lr-panel", classes="panel"):
            yield Static("", id="lr-summary", classes="summary", markup=False)
            yield Static("", id="lr-spark", classes="spark", markup=False)
            yield LrGradPlot(id="lr-plot")
        with Vertical(id="scale-panel", classes="panel"):
            yield Static("", id="scale-summary", classes="summary", markup=False)
            yield Static("", id="scale-spark", classes="spark", markup=False)
            yield LossScalePlot(id="scale-plot")
        with Vertical(id="memory-panel", classes="panel"):
            yield MemoryPanel(self._forecast, store=self.store, id="memory")

    def on_mount(self) -> None:
        for name, title in TITLES.items():
            self.query_one(f"#{name}-panel").border_title = title
        for drawn in ("smoothing", "log_scale", "zoom", "version", "alert_steps"):  # a change redraws
            self.watch(self, drawn, self.redraw, init=False)
        self._show_panels()

    # ------------------------------------------------------------ bound state

    def watch_reading(self, fraction: float | None) -> None:
        if fraction is None:
            self.redraw()
        else:
            summary = self.query_one("#loss-summary", Static)
            show_text(summary, f"reading the run's events… {fraction:.0%} (drawn once read)")

    def watch_shown_panel(self) -> None:
        self._show_panels()

    def watch_low_bandwidth(self) -> None:
        self.call_after_refresh(self.redraw)  # the sparklines (or plots) have their size after a refresh

    def _show_panels(self) -> None:
        """Each panel on or off, its border naming its keys."""
        chosen = self.shown_panel
        for number_, name in enumerate(PANELS, 1):
            panel = self.query_one(f"#{name}-panel")
            panel.set_class(name == chosen, "-shown")
            panel.border_subtitle = ("p: next panel · 0: all" if chosen else f"{number_}/p: alone") + PANEL_KEYS.get(name, "")
        self.call_after_refresh(self.redraw)  # a panel that appears has a new size

    def show_startup(self, line: str | None) -> None:
        """What a starting run is doing (#35), in the loss panel's line until a step is logged."""
        if not line or self.reading is not None:
            return
        with self.store.lock:
            logged = self.store.series["loss"].last is not None or bool(self.store.problems())
        if not logged:
            show_text(self.query_one("#loss-summary", Static), line)

    # ------------------------------------------------------------ drawing

    def redraw(self) -> None:
        if self.reading is not None or not self.is_mounted:
            return  # drawn once the backlog is read
        store = self.store
        with store.lock:
            self._draw_loss(store)
            self._draw_lr(store)
            self._draw_scale(store)

    def _max_points(self, plot_id: str) -> int:
        """About one point per column: min/max thinning keeps the extremes, and Plotext's cost grows
        with the points it joins (a 160x48 frame stays under 50 ms)."""
        return max(60, min(400, self.query_one(plot_id).size.width))

    def _x_range(self, store: MetricsStore) -> tuple[float, float] | None:
        """The x axis of every plot: the whole run (0 to max_steps, or a round number past the newest
        step) so that a new step adds a column instead of moving them all; a zoom follows the newest step."""
        last = store.series["loss"].last or store.series["learning_rate"].last
        if self.zoom or last is None:
            return None
        max_steps = store.max_steps()
        if max_steps is not None and max_steps >= last[0]:
            return 0.0, float(max_steps)
        return 0.0, round_limits(0.0, float(last[0]))[1]

    def _points(self, series: Series, plot_id: str, xlim: tuple[float, float] | None) -> tuple[Any, Any]:
        """The series' points for a plot: per pixel column of a fixed x axis, else thinned by the store."""
        n = self._max_points(plot_id)
        if xlim is None:
            return series.points(self.zoom, n)
        return pixel_thin(series.points(self.zoom, POINTS_ASKED), xlim[0], xlim[1], n)

    def _alerts_within(self, train: tuple[Any, Any], xlim: tuple[float, float] | None) -> tuple[int, ...]:
        """The alert steps inside the plotted range (a zoom shows only the newest steps)."""
        xs = train[0] if train and len(train[0]) else ()
        low, high = xlim if xlim is not None else ((min(xs), max(xs)) if len(xs) else (0.0, -1.0))
        return tuple(step for step in self.alert_steps if low <= step <= high)

    def _draw_loss(self, store: MetricsStore) -> None:
        loss, xlim = store.series["loss"], self._x_range(store)
        train = self._points(loss, "#loss-plot", xlim)
        smooth = self._points(store.loss_smooth, "#loss-plot", xlim) if self.smoothing else None
        evals = self._points(store.eval_loss, "#loss-plot", xlim)
        zoom = f"last {self.zoom} steps" if self.zoom else "all steps"
        self.query_one(LossPlot).show(train, smooth, evals, log_scale=self.log_scale, xlim=xlim,
                                      title=f"{zoom}{' · log y' if self.log_scale else ''}",
                                      alerts=self._alerts_within(train, xlim))
        self._spark("#loss-spark", train)
        damaged = " · ".join(store.problems())
        if loss.last is None:
            if damaged:
                show_text(self.query_one("#loss-summary", Static), f"no logged step yet · {damaged}")
            return
        low = loss.minimum()
        parts = [f"train {number(loss.last[1])} @ {loss.last[0]:g}",
                 f"min {number(low[1])} @ {low[0]:g}" if low else ""]
        if store.eval_loss.last:
            parts.append(f"eval {number(store.eval_loss.last[1])} @ {store.eval_loss.last[0]:g}")
        if self.smoothing and store.loss_smooth.last:
            parts.append(f"EMA({store.smoothing:g}) {number(store.loss_smooth.last[1])}")
        if damaged:
            parts.append(damaged)
        show_text(self.query_one("#loss-summary", Static), " · ".join(p for p in parts if p))

    def _draw_lr(self, store: MetricsStore) -> None:
        lr, grad, xlim = store.series["learning_rate"], store.series["grad_norm"], self._x_range(store)
        grad_points = self._points(grad, "#lr-plot", xlim)
        self.query_one(LrGradPlot).show(self._points(lr, "#lr-plot", xlim), grad_points, title="", xlim=xlim)
        self._spark("#lr-spark", grad_points, "grad ")
        parts = []
        if lr.last:
            parts.append(f"lr {number(lr.last[1], 3)}")
        if grad.last and (peak := grad.maximum()):
            parts.append(f"grad norm {number(grad.last[1])} (max {number(peak[1])})")
        if store.grad_norm_lost_at is not None:
            parts.append(f"NaN/inf since step {store.grad_norm_lost_at:g}")
        show_text(self.query_one("#lr-summary", Static), " · ".join(parts))

    def _draw_scale(self, store: MetricsStore) -> None:
        panel, summary = self.query_one("#scale-panel"), self.query_one("#scale-summary", Static)
        if store.run_begin is None:
            show_text(summary, "waiting for the run to begin")
            return
        no_scaler = store.scaler is None
        panel.set_class(no_scaler, "-no-scaler")
        if no_scaler:
            show_text(summary, f"no loss scaler: {store.scaler_reason or 'the run did not say why'}")
            return
        scale, xlim = store.series["loss_scale"], self._x_range(store)
        scale_points = self._points(scale, "#scale-plot", xlim)
        self.query_one(LossScalePlot).show(scale_points, self._points(store.overflows, "#scale-plot", xlim),
                                           title="", xlim=xlim)
        self._spark("#scale-spark", scale_points)
        show_text(summary, f"{store.scaler}: scale {scale_text(scale.last[1] if scale.last else None)} · "
                           f"{store.overflow_total} overflows · {store.skipped_total} skipped steps")

    def _spark(self, spark_id: str, points: tuple[Any, Any], prefix: str = "") -> None:
        """The low-bandwidth stand-in of a plot: its newest points as one line of block characters."""
        if not self.low_bandwidth:
            return
        spark = self.query_one(spark_id, Static)
        width = max(8, spark.size.width - len(prefix) - 1)
        show_text(spark, prefix + sparkline(list(points[1]), width))
