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

Files: this one is the screen (layout, keys, the poll and memory workers, the progress line);
`tui/widgets/monitor_panels.py` draws the panels from the store, bound to this screen's reactives;
`tui/screens/monitor_actions.py` stops the run, merges its LoRA and opens the chat;
`tui/feed.py` reads the run folder.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header
from textual.worker import Worker, get_current_worker

from backend.cluster.follow import seen_line
from backend.hardware.monitor import SystemMonitor, SystemSample
from backend.series import MetricsStore
from tui.feed import RunFeed
from tui.screens.monitor_actions import RunActions
from tui.widgets.alerts_panel import AlertsPanel
from tui.widgets.log_tail import LogTail
from tui.widgets.memory_panel import MemoryPanel
from tui.widgets.monitor_panels import PANELS, MetricPanels
from tui.widgets.run_progress import RunProgress
from tui.widgets.scoreboard import ScoreboardPanel
from tui.worker_failures import WorkerFailures

ZOOMS: tuple[int | None, ...] = (None, 1000, 200, 50)
COMPACT_WIDTH, COMPACT_HEIGHT = 120, 36
KEEP_GOING = "closing the app or this screen never stops the run"
DEFAULT_REFRESH_SECONDS = 2.0  # as nvitop: ~2 KiB/s for a live run at 120x36 (bench/terminal_traffic.py)
REFRESH_CHOICES = (0.5, 1.0, 2.0, 5.0, 10.0)
READING_REPORT_SECONDS = 0.5  # while a backlog is read, how often the "reading N %" line moves


class MonitorScreen(WorkerFailures, RunActions, Screen[None]):
    CSS_PATH = "monitor.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back", id="monitor-back", tooltip="Back to the runs list (the run goes on)"),
        # the loss panel's own keys are written on its border (s l z), the view keys (i b) are in ctrl+p: the footer
        # keeps what acts on the run, and fits 80 columns
        Binding("s", "toggle_smoothing", "Smooth", show=False, id="monitor-smooth", tooltip="Show or hide the EMA of the loss"),
        Binding("l", "toggle_log", "Log y", show=False, id="monitor-log", tooltip="Logarithmic loss axis"),
        Binding("z", "zoom", "Zoom", show=False, id="monitor-zoom", tooltip="All steps, or only the last 1000 / 200 / 50"),
        Binding("p", "next_panel", "Panel", show=False, id="monitor-panel", tooltip="Show one panel large; cycles through them"),
        Binding("1", "show_panel('loss')", show=False, id="monitor-panel-loss", tooltip="Loss panel alone"),
        Binding("2", "show_panel('lr')", show=False, id="monitor-panel-lr", tooltip="LR and grad norm alone"),
        Binding("3", "show_panel('scale')", show=False, id="monitor-panel-scale", tooltip="Loss scale alone"),
        Binding("4", "show_panel('memory')", show=False, id="monitor-panel-memory", tooltip="Memory alone"),
        Binding("0", "show_panel('')", show=False, id="monitor-panel-all", tooltip="Every panel"),
        Binding("x", "stop", "Stop", id="monitor-stop", tooltip="Stop this run (asks first)"),
        Binding("w", "save_now", "Save", id="monitor-save-now",
                tooltip="Save a checkpoint at the end of the current step; training goes on (workbench save RUN)"),
        Binding("m", "merge", "Merge", id="monitor-merge",
                tooltip="Merge the best LoRA checkpoint (workbench checkpoints RUN) into the base model, as a new folder (asks first)"),
        Binding("t", "chat", "Chat", id="monitor-chat", tooltip="Chat with the best checkpoint (or its merged model), tokens streaming"),
        Binding("c", "toggle_scoreboard", "Checkpoints", id="monitor-checkpoints",
                tooltip="The checkpoint scoreboard in place of the log: best marked *, enter chats, m merges, p pins"),
        Binding("d", "doctor", "Doctor", show=False, id="monitor-doctor",
                tooltip="Why is it slow: where each step's time goes, tokens/s, MFU, and the change that would help"),
        Binding("i", "next_interval", "Interval", show=False, id="monitor-interval",
                tooltip="Update interval: 0.5 / 1 / 2 / 5 / 10 s (a longer one sends less over a slow link)"),
        Binding("b", "toggle_low_bandwidth", "Low bw", show=False, id="monitor-low-bandwidth",
                tooltip="Low-bandwidth mode: one-line sparklines instead of braille plots"),
    ]

    smoothing: reactive[bool] = reactive(True, init=False)
    """Draw the EMA of the train loss over the raw one."""
    log_scale: reactive[bool] = reactive(False, init=False)
    """Logarithmic y axis on the loss plot."""
    zoom: reactive[int | None] = reactive(None, init=False)
    """Show only the last N steps; None = the whole run."""
    panel: reactive[str] = reactive("", init=False)
    """The one panel the user chose to show large ("" = all of them)."""
    # bound down to the panels; none repaints the screen itself (over SSH a repaint of the
    # whole screen every poll is ~7 KB: bench/terminal_traffic.py)
    shown_panel: reactive[str] = reactive("", init=False, repaint=False)
    """The one panel shown large: the chosen one, or the loss on a small terminal ("" = all)."""
    low_bandwidth: reactive[bool] = reactive(False, init=False, repaint=False)
    """One-line sparklines instead of the braille plots."""
    version: reactive[int] = reactive(-1, init=False, repaint=False)
    """The store's version as last read (the panels redraw when it changes)."""
    reading: reactive[float | None] = reactive(None, init=False, repaint=False)
    """While a backlog is read: the fraction read (nothing is drawn until it is whole)."""
    alert_steps: reactive[tuple[int, ...]] = reactive((), init=False, repaint=False)
    """Steps of the watchdog's alerts, marked on the loss plot."""

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
        yield MetricPanels(self.feed.store, self._read_forecast(), id="panels").data_bind(
            MonitorScreen.smoothing, MonitorScreen.log_scale, MonitorScreen.zoom, MonitorScreen.shown_panel,
            MonitorScreen.low_bandwidth, MonitorScreen.version, MonitorScreen.reading, MonitorScreen.alert_steps)
        yield AlertsPanel(self.feed.run.path, id="alerts")  # the watchdog's alerts (#15)
        yield LogTail(id="log-tail")
        yield ScoreboardPanel(self.feed.run.path, id="scoreboard")  # key c, in place of the log (#24)
        yield Footer()

    def _read_forecast(self) -> dict | None:
        try:
            return json.loads(self.feed.run.forecast_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def on_mount(self) -> None:
        self.title = f"run {self.feed.run.run_id}"
        self.sub_title = KEEP_GOING
        self.poll_interval = self._chosen_interval or getattr(self.app, "refresh_seconds", None) or self.poll_interval
        low = self._chosen_low_bandwidth
        self.low_bandwidth = bool(getattr(self.app, "low_bandwidth", False) if low is None else low)
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
        narrow = event.size.width < COMPACT_WIDTH  # every key whole at 80 columns (ctrl+p opens the palette still)
        footer = self.query_one(Footer)
        footer.compact, footer.show_command_palette = narrow, not narrow

    def _apply_panel(self) -> None:
        self.shown_panel = self.panel or ("loss" if self.has_class("-compact") else "")
        self.set_class(bool(self.shown_panel), "-single")

    def watch_low_bandwidth(self, low: bool) -> None:
        self.set_class(low, "-low-bandwidth")

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
        changed = self.feed.poll(lambda fraction: self.post_message(self.Reading(fraction)),
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

    # ------------------------------------------------------------ showing

    @on(AlertsPanel.Changed)
    def _alerts_changed(self, event: AlertsPanel.Changed) -> None:
        self.alert_steps = event.steps

    @on(Reading)
    def _reading(self, message: Reading) -> None:
        self.reading = message.fraction

    @on(Changed)
    def _changed(self) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        self._show_progress()
        self.version = self.feed.store.version
        self.reading = None  # after the version: the panels draw once
        log = self.query_one(LogTail)
        log.add_lines(self.feed.log.take_pending())
        log.set_diagnosis(self.feed.diagnosis, self._fallback_diagnosis())
        self.query_one(MemoryPanel).show(self.sample, self.feed.store.last_log, self.feed.store.memory_phases)
        self._follow_activity()
        board = self.query_one(ScoreboardPanel)
        if board.has_class("-shown"):
            board.reload()
        self.redraw_seconds = time.perf_counter() - started
        self.redraw_cpu_seconds = time.thread_time() - cpu
        self.redraws += 1

    def stopped(self) -> None:
        self.post_message(self.Changed())

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
        self.query_one(MemoryPanel).show(self.sample, self.feed.store.last_log, self.feed.store.memory_phases)
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
        now = self.clock()
        self.query_one(RunProgress).show(self.feed.state, self.feed.store.throughput(), now)
        self.query_one(MetricPanels).show_startup(self._startup_line(now))
        self.sub_title = self._seen_title(now)

    def _seen_title(self, now: float) -> str:
        """A run from elsewhere (another host, a synced copy) says how old what is shown is (#40)."""
        state = self.feed.state
        elsewhere = state.elsewhere() if state is not None and state.status != "damaged" else None
        seen = seen_line(self.feed.run.path, elsewhere=elsewhere, now=now)
        return f"{KEEP_GOING} · seen: {seen}" if seen else KEEP_GOING

    def _startup_line(self, now: float) -> str | None:
        """What the loss panel says before the first logged step: the starting run's phase (#35)."""
        startup, state = self.feed.startup, self.feed.state
        if startup is not None:
            return f"no logged step yet: {startup.text(now)}"
        if state is not None and not state.is_active:
            return "no logged step: the run ended before its first one"
        return None

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
        self.low_bandwidth = not self.low_bandwidth
        if hasattr(self.app, "low_bandwidth"):
            self.app.low_bandwidth = self.low_bandwidth
        self.notify("low-bandwidth: sparklines instead of plots" if self.low_bandwidth else "plots", timeout=2)

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

    @on(ScoreboardPanel.ChatAsked)
    def _chat_with_row(self, event: ScoreboardPanel.ChatAsked) -> None:
        self.action_chat(event.step)

    @on(ScoreboardPanel.MergeAsked)
    def _merge_row(self, event: ScoreboardPanel.MergeAsked) -> None:
        self.action_merge(event.step)

    def action_next_panel(self) -> None:
        order = ("",) + PANELS
        self.panel = order[(order.index(self.panel) + 1) % len(order)]

    def action_show_panel(self, name: str) -> None:
        self.panel = name
