"""The live monitor of one run: loss, learning rate and grad norm, loss scale, memory, log.

Fed only by the run folder: a timer starts a thread worker that reads what was appended
to events.jsonl and output.log since the last read (RunFeed) and posts `Changed`; a second
thread samples GPUs, host RAM and the run's processes and posts `Sampled`. Both messages
replace a queued one of their kind, so a busy run never floods the UI.
Leaving the screen or closing the app never touches the run.

Terminal traffic (users watch over SSH): one frame per update interval (`--refresh`, key i),
and a frame repaints only what changed — unchanged text is not re-sent, the memory panel
changes when a rounded figure does, a plot repaints only the cells a new point moved, and a
run that ended stops sampling. A screen where nothing changes writes nothing. Key b (or
`--low-bandwidth`) replaces the braille plots with one-line sparklines. A long backlog is
read first ("reading N %"), then drawn once.
"""

from __future__ import annotations

import json

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.events import Resize
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.timer import Timer
from textual.worker import Worker, get_current_worker

from backend.runs.manager import stop_run
from backend.series import MetricsStore
from backend.system_monitor import SystemMonitor, SystemSample
from tui.feed import RunFeed
from tui.modals.dialogs import ConfirmModal
from tui.worker_failures import WorkerFailures
from tui.widgets.alerts_panel import AlertsPanel
from tui.widgets.log_tail import LogTail
from tui.widgets.memory_panel import MemoryPanel
from tui.widgets.metric_plots import LossPlot, LossScalePlot, LrGradPlot, MetricPlot, pixel_thin, round_limits
from tui.widgets.quiet import show_text, sparkline
from tui.widgets.run_progress import RunProgress
from tui.widgets.units import number

PANELS = ("loss", "lr", "scale", "memory")
ZOOMS: tuple[int | None, ...] = (None, 1000, 200, 50)
COMPACT_WIDTH, COMPACT_HEIGHT = 120, 36
KEEP_GOING = "closing the app or this screen never stops the run"
DEFAULT_REFRESH_SECONDS = 2.0  # as nvitop: ~2 KiB/s for a live run at 120x36 (bench/terminal_traffic.py)
REFRESH_CHOICES = (0.5, 1.0, 2.0, 5.0, 10.0)
POINTS_ASKED = 4096  # points asked of the store before thinning them per pixel column
READING_REPORT_SECONDS = 0.5  # while a backlog is read, how often the "reading N %" line moves


def _scale_text(scale: float | None) -> str:
    if scale is None:
        return "-"
    exponent = math.log2(scale) if scale > 0 else 0.5
    return f"{scale:g} = 2^{int(exponent)}" if exponent.is_integer() else f"{scale:g}"


class MonitorScreen(WorkerFailures, Screen[None]):
    CSS_PATH = "monitor.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back", id="monitor-back", tooltip="Back to the runs list (the run goes on)"),
        Binding("s", "toggle_smoothing", "Smooth", id="monitor-smooth", tooltip="Show or hide the EMA of the loss"),
        Binding("l", "toggle_log", "Log y", id="monitor-log", tooltip="Logarithmic loss axis"),
        Binding("z", "zoom", "Zoom", id="monitor-zoom", tooltip="All steps, or only the last 1000 / 200 / 50"),
        Binding("p", "next_panel", "Panel", id="monitor-panel", tooltip="Show one panel large; cycles through them"),
        Binding("1", "show_panel('loss')", show=False, id="monitor-panel-loss", tooltip="Loss panel alone"),
        Binding("2", "show_panel('lr')", show=False, id="monitor-panel-lr", tooltip="LR and grad norm alone"),
        Binding("3", "show_panel('scale')", show=False, id="monitor-panel-scale", tooltip="Loss scale alone"),
        Binding("4", "show_panel('memory')", show=False, id="monitor-panel-memory", tooltip="Memory alone"),
        Binding("0", "show_panel('')", show=False, id="monitor-panel-all", tooltip="Every panel"),
        Binding("x", "stop", "Stop run", id="monitor-stop", tooltip="Stop this run (asks first)"),
        Binding("m", "merge", "Merge", id="monitor-merge",
                tooltip="Merge the newest LoRA checkpoint into the base model, as a new folder (asks first)"),
        Binding("t", "chat", "Chat", id="monitor-chat", tooltip="Chat with the newest checkpoint, tokens streaming"),
        Binding("i", "next_interval", "Interval", id="monitor-interval",
                tooltip="Update interval: 0.5 / 1 / 2 / 5 / 10 s (a longer one sends less over a slow link)"),
        Binding("b", "toggle_low_bandwidth", "Low bw", id="monitor-low-bandwidth",
                tooltip="Low-bandwidth mode: one-line sparklines instead of braille plots"),
    ]

    smoothing: reactive[bool] = reactive(True, init=False)
    """Draw the EMA of the train loss over the raw one."""
    log_scale: reactive[bool] = reactive(False, init=False)
    """Logarithmic y axis on the loss plot."""
    zoom: reactive[int | None] = reactive(None, init=False)
    """Show only the last N steps; None = the whole run."""
    panel: reactive[str] = reactive("", init=False)
    """The one panel shown large ("" = all of them, or the loss on a small terminal)."""

    class Changed(Message, bubble=False):
        """New events, log lines or state were read."""

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, MonitorScreen.Changed)

    class Reading(Message, bubble=False):
        """A long backlog is being read: how far (0-1)."""

        def __init__(self, fraction: float) -> None:
            super().__init__()
            self.fraction = fraction

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, MonitorScreen.Reading)

    class Sampled(Message, bubble=False):
        """A new memory sample."""

        def __init__(self, sample: SystemSample) -> None:
            super().__init__()
            self.sample = sample

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, MonitorScreen.Sampled)

    def __init__(
        self,
        run_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        poll_interval: float | None = None,
        low_bandwidth: bool | None = None,
        system_monitor: SystemMonitor | None = None,
        store: MetricsStore | None = None,
        name: str | None = None,
        id: str | None = None,
    ) -> None:
        """`clock` and `system_monitor` are replaceable so that snapshots do not depend on the moment or machine.
        `poll_interval` (seconds between frames) and `low_bandwidth` default to the app's settings."""
        super().__init__(name=name, id=id)
        self.feed = RunFeed(Path(run_dir), store)
        self.clock = clock
        self._chosen_interval = poll_interval
        self._chosen_low_bandwidth = low_bandwidth
        self.poll_interval = poll_interval or DEFAULT_REFRESH_SECONDS
        self._timer: Timer | None = None
        self.reading: float | None = None  # while a backlog is read: the fraction read
        self.polls = 0  # rounds of reading the run folder (tests count them)
        self.system = system_monitor or SystemMonitor(self.feed.run.path, pids=self._known_pids, interval=2.0)
        self.sample: SystemSample | None = None
        self.redraw_seconds = 0.0  # how long the last redraw took, wall and UI-thread CPU (the bench reads them)
        self.redraw_cpu_seconds = 0.0
        self.redraws = 0
        self._poller: Worker[None] | None = None
        self._stop_sampling = threading.Event()
        self._sampler: Worker[None] | None = None

    # ------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        yield RunProgress(id="progress")
        with Grid(id="panels"):
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
                yield MemoryPanel(self._read_forecast(), id="memory")
        yield AlertsPanel(self.feed.run.path, id="alerts")  # the watchdog's alerts (#15)
        yield LogTail(id="log-tail")
        yield Footer()

    def _read_forecast(self) -> dict | None:
        try:
            return json.loads(self.feed.run.forecast_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def on_mount(self) -> None:
        self.title = f"run {self.feed.run.run_id}"
        self.sub_title = KEEP_GOING
        titles = {"loss": "loss", "lr": "learning rate · grad norm", "scale": "loss scale (log2)", "memory": "memory"}
        for panel, title in titles.items():
            self.query_one(f"#{panel}-panel").border_title = title
        self.poll_interval = self._chosen_interval or getattr(self.app, "refresh_seconds", None) or self.poll_interval
        low = self._chosen_low_bandwidth
        self.set_class(bool(getattr(self.app, "low_bandwidth", False) if low is None else low), "-low-bandwidth")
        self._apply_panel()
        self._timer = self.set_interval(self.poll_interval, self._tick)
        self._start_poll()
        self._start_sampling()

    def on_screen_resume(self) -> None:
        if self.polls:
            self._tick()

    def on_unmount(self) -> None:
        self._stop_sampling.set()

    def on_resize(self, event: Resize) -> None:
        compact = event.size.width < COMPACT_WIDTH or event.size.height < COMPACT_HEIGHT
        if compact != self.has_class("-compact"):
            self.set_class(compact, "-compact")
            self._apply_panel()

    def _apply_panel(self) -> None:
        chosen = self.panel or ("loss" if self.has_class("-compact") else "")
        self.set_class(bool(chosen), "-single")
        for number_, name in enumerate(PANELS, 1):
            panel = self.query_one(f"#{name}-panel")
            panel.set_class(name == chosen, "-shown")
            panel.border_subtitle = "p: next panel · 0: all" if chosen else f"{number_}: alone"
        self.call_after_refresh(self._redraw_plots)  # a panel that appears has a new size

    # ------------------------------------------------------------ workers

    def _known_pids(self) -> tuple[int | None, ...]:
        state = self.feed.state
        return (state.supervisor_pid, state.trainer_pid) if state else ()

    def _tick(self) -> None:
        """One frame per interval: read what the run wrote; the clock-driven figures of an active run.
        Nothing while another screen (the chat, a dialog) is on top: its repaint would repaint that one."""
        if not self.is_active:
            return
        self._start_poll()
        state = self.feed.state
        if state is not None and state.is_active:
            self._show_progress()

    def retry(self) -> None:
        self._start_poll()

    def _start_poll(self) -> None:
        if self._poller is None or self._poller.is_finished:
            self._poller = self._poll()

    @work(thread=True, group="monitor-poll", exit_on_error=False, description="Reading the run folder")
    def _poll(self) -> None:
        """Read to the end; a long backlog is read whole before anything is drawn (with a "reading N %" line)."""
        worker = get_current_worker()
        changed = self.feed.catch_up(lambda fraction: self.post_message(self.Reading(fraction)),
                                     lambda: worker.is_cancelled, READING_REPORT_SECONDS)
        if changed and not worker.is_cancelled:
            self.post_message(self.Changed())
        self.polls += 1

    def _start_sampling(self) -> None:
        if self._sampler is None or self._sampler.is_finished:
            self._stop_sampling = threading.Event()
            self._sampler = self._sample_system(self._stop_sampling)

    @work(thread=True, group="monitor-system", exit_on_error=False, description="Sampling memory")
    def _sample_system(self, stop: threading.Event) -> None:
        self.system.run(lambda sample: self.post_message(self.Sampled(sample)), stop,
                        on_error=lambda err: self.app.notify(f"memory sampling failed: {err}", severity="warning"))

    @work(thread=True, group="monitor-stop", exit_on_error=False, description="Stopping the run")
    def _stop_run(self) -> None:
        lines = stop_run(self.feed.run)
        self.app.notify("\n".join(lines), title=f"Stopped {self.feed.run.run_id}")
        self.post_message(self.Changed())

    @work(thread=True, group="monitor-merge", exclusive=True, exit_on_error=False, description="Merging the LoRA")
    def _merge(self) -> None:
        """Start `swift export --merge_lora` as a tracked job and report how it ends."""
        from backend.jobs.job import refresh_job
        from backend.jobs.merge import MergeRefused, start_merge

        try:
            job = start_merge(self.feed.run)
        except MergeRefused as err:
            self.app.notify(str(err), title="Merge refused", severity="error", timeout=10, markup=False)
            return
        target = job.read_spec().output
        self.app.notify(f"merging into {target} (job {job.job_id})", title="Merge started", markup=False)
        while (state := refresh_job(job)).is_active and not get_current_worker().is_cancelled:
            time.sleep(1.0)
        if state.status == "finished":
            self.app.notify(f"{target}\npick it in the launch workspace, or press t to chat", title="Merged", markup=False)
        elif state.is_active:
            return  # the screen closed; the job goes on and `workbench jobs RUN` shows it
        else:
            self.app.notify(f"{state.status}: {state.failure_reason or 'see the job log'}", title="Merge failed",
                            severity="error", timeout=15)

    # ------------------------------------------------------------ showing

    @on(Reading)
    def _reading(self, message: Reading) -> None:
        self.reading = message.fraction
        show_text(self.query_one("#loss-summary", Static),
                  f"reading the run's events… {message.fraction:.0%} (drawn once read)")

    @on(Changed)
    def _changed(self) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        self.reading = None
        self._show_progress()
        self._redraw_plots()
        log = self.query_one(LogTail)
        log.add_lines(self.feed.log.take_pending())
        log.set_diagnosis(self.feed.diagnosis, self._fallback_diagnosis())
        self.query_one(MemoryPanel).show(self.sample, self.feed.store.last_log)
        self._follow_activity()
        self.redraw_seconds = time.perf_counter() - started
        self.redraw_cpu_seconds = time.thread_time() - cpu
        self.redraws += 1

    def _follow_activity(self) -> None:
        """Sample memory while the run is alive; an ended run keeps its last sample (nothing left to measure)."""
        state = self.feed.state
        if state is not None and state.is_active:
            self._start_sampling()
        elif state is not None and self.sample is not None:
            self._stop_sampling.set()

    @on(Sampled)
    def _sampled(self, message: Sampled) -> None:
        self.sample = message.sample
        self.query_one(MemoryPanel).show(self.sample, self.feed.store.last_log)
        self._follow_activity()

    def _fallback_diagnosis(self) -> str | None:
        store, state = self.feed.store, self.feed.state
        if store.grad_norm_lost_at is not None:
            return (f"✗ the gradient norm became NaN/inf at step {store.grad_norm_lost_at:g} — the run diverged: "
                    "lower learning_rate, add warmup, or check the data")
        if state is not None and state.failure_reason:
            return f"✗ {state.failure_reason}"
        return self.feed.state_error

    def _show_progress(self) -> None:
        self.query_one(RunProgress).show(self.feed.state, self.feed.store.throughput(), self.clock())

    def _redraw_plots(self) -> None:
        if self.reading is not None:
            return  # drawn once the backlog is read
        store = self.feed.store
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
        max_steps = (store.last_log or {}).get("max_steps") or (store.run_begin or {}).get("max_steps")
        if isinstance(max_steps, (int, float)) and max_steps >= last[0]:
            return 0.0, float(max_steps)
        return 0.0, round_limits(0.0, float(last[0]))[1]

    def _points(self, series, plot_id: str, xlim: tuple[float, float] | None) -> tuple:
        """The series' points for a plot: per pixel column of a fixed x axis, else thinned by the store."""
        n = self._max_points(plot_id)
        if xlim is None:
            return series.points(self.zoom, n)
        return pixel_thin(series.points(self.zoom, POINTS_ASKED), xlim[0], xlim[1], n)

    def _draw_loss(self, store: MetricsStore) -> None:
        loss, xlim = store.series["loss"], self._x_range(store)
        train = self._points(loss, "#loss-plot", xlim)
        smooth = self._points(store.loss_smooth, "#loss-plot", xlim) if self.smoothing else None
        evals = self._points(store.eval_loss, "#loss-plot", xlim)
        zoom = f"last {self.zoom} steps" if self.zoom else "all steps"
        self.query_one(LossPlot).show(train, smooth, evals, log_scale=self.log_scale, xlim=xlim,
                                      title=f"{zoom}{' · log y' if self.log_scale else ''}")
        self._spark("#loss-spark", train)
        if loss.last is None:
            return
        low = loss.minimum()
        parts = [f"train {number(loss.last[1])} @ {loss.last[0]:g}",
                 f"min {number(low[1])} @ {low[0]:g}" if low else ""]
        if store.eval_loss.last:
            parts.append(f"eval {number(store.eval_loss.last[1])} @ {store.eval_loss.last[0]:g}")
        if self.smoothing and store.loss_smooth.last:
            parts.append(f"EMA({store.smoothing:g}) {number(store.loss_smooth.last[1])}")
        show_text(self.query_one("#loss-summary", Static), " · ".join(p for p in parts if p))

    def _draw_lr(self, store: MetricsStore) -> None:
        lr, grad, xlim = store.series["learning_rate"], store.series["grad_norm"], self._x_range(store)
        grad_points = self._points(grad, "#lr-plot", xlim)
        self.query_one(LrGradPlot).show(self._points(lr, "#lr-plot", xlim), grad_points, title="", xlim=xlim)
        self._spark("#lr-spark", grad_points, "grad ")
        parts = []
        if lr.last:
            parts.append(f"lr {number(lr.last[1], 3)}")
        if grad.last:
            parts.append(f"grad norm {number(grad.last[1])} (max {number(grad.maximum()[1])})")
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
        show_text(summary, f"{store.scaler}: scale {_scale_text(scale.last[1] if scale.last else None)} · "
                       f"{store.overflow_total} overflows · {store.skipped_total} skipped steps")

    def _spark(self, spark_id: str, points: tuple, prefix: str = "") -> None:
        """The low-bandwidth stand-in of a plot: its newest points as one line of block characters."""
        if not self.has_class("-low-bandwidth"):
            return
        spark = self.query_one(spark_id, Static)
        width = max(8, spark.size.width - len(prefix) - 1)
        show_text(spark, prefix + sparkline(list(points[1]), width))

    # ------------------------------------------------------------ actions

    def action_next_interval(self) -> None:
        later = [s for s in REFRESH_CHOICES if s > self.poll_interval + 1e-9]
        self.set_refresh(later[0] if later else REFRESH_CHOICES[0])
        self.notify(f"updates every {self.poll_interval:g} s", timeout=2)

    def set_refresh(self, seconds: float) -> None:
        """Draw one frame every `seconds` (the app remembers it for the next monitor)."""
        self.poll_interval = seconds
        if hasattr(self.app, "refresh_seconds"):
            self.app.refresh_seconds = seconds
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(seconds, self._tick)

    def action_toggle_low_bandwidth(self) -> None:
        low = not self.has_class("-low-bandwidth")
        self.set_class(low, "-low-bandwidth")
        if hasattr(self.app, "low_bandwidth"):
            self.app.low_bandwidth = low
        self.notify("low-bandwidth: sparklines instead of plots" if low else "plots", timeout=2)
        self.call_after_refresh(self._redraw_plots)


    def watch_smoothing(self) -> None:
        self._redraw_plots()

    def watch_log_scale(self) -> None:
        self._redraw_plots()

    def watch_zoom(self) -> None:
        self._redraw_plots()

    def watch_panel(self) -> None:
        self._apply_panel()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_toggle_smoothing(self) -> None:
        self.smoothing = not self.smoothing

    def action_toggle_log(self) -> None:
        self.log_scale = not self.log_scale

    def action_zoom(self) -> None:
        at = ZOOMS.index(self.zoom) if self.zoom in ZOOMS else -1  # a zoom set elsewhere goes back to all
        self.zoom = ZOOMS[(at + 1) % len(ZOOMS)]
        self.notify("all steps" if self.zoom is None else f"last {self.zoom} steps", timeout=2)

    def action_next_panel(self) -> None:
        order = ("",) + PANELS
        self.panel = order[(order.index(self.panel) + 1) % len(order)]

    def action_show_panel(self, name: str) -> None:
        self.panel = name

    def action_stop(self) -> None:
        state = self.feed.state
        if state is None or not state.is_active:
            self.notify(f"the run is {state.status if state else 'unknown'}; nothing to stop", severity="warning")
            return
        body = (f"Stop {self.feed.run.run_id}? Every process of the run gets SIGINT, then SIGTERM, then SIGKILL. "
                "It can be resumed later from its last checkpoint.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify("stopping…", timeout=3)
                self._stop_run()

        self.app.push_screen(ConfirmModal("Stop the run", body, "Stop"), answered)

    def action_chat(self) -> None:
        from backend.jobs.targets import TargetError, newest_model_of_run

        try:
            target = newest_model_of_run(self.feed.run.path)
        except TargetError as err:
            self.app.notify(str(err), title="Cannot open the chat", severity="error", timeout=15, markup=False)
            return
        self.app.open_chat(target)

    def action_merge(self) -> None:
        body = ("Runs `swift export --merge_lora true` on the newest checkpoint as a job of this run. The merged "
                "model goes into a new folder under merged/; nothing existing is overwritten.")

        def answered(yes: bool | None) -> None:
            if yes:
                self._merge()

        self.app.push_screen(ConfirmModal("Merge the LoRA", body, "Merge", danger=False), answered)
