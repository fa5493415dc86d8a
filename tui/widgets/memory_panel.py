"""The memory panel: each GPU (NVML), host RAM, the run's process tree, the trainer's own counters.

It repaints only when a figure as printed (rounded) changes, and then only the line that
holds it: each line is its own widget, so a new sample whose rounded figures are those
already shown sends nothing to the terminal, and a new host RAM figure sends one line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from backend.contract.events import Log, MemoryPhase
from backend.estimate.creep import StepMemory, creep, peak
from backend.estimate.measured import comparable_forecasts, compare_phases, error_percent, keep_phase, phase_forecasts
from backend.hardware.monitor import SystemSample
from tui.widgets.quiet import show_text
from tui.widgets.units import size

MAX_LINES = 32  # GPUs, host, run tree, trainer counters, forecast, its phases
# per phase, the one measurement shown: the GPU's when the run has one, else the host's
PHASE_KINDS = (("cuda_max_reserved_bytes", "GPU reserved"), ("host_rss_bytes", "host RSS"))


def _grid(rows: tuple[tuple[str, ...], ...]) -> list[str]:
    """Rows as aligned columns, one space apart (as a grid table prints them)."""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(len(r) for r in rows))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _share(used: int | None, total: int | None) -> str:
    if used is None or total is None or not total:
        return f"{size(used)} / {size(total)}"
    return f"{size(used)} / {size(total)} ({used / total:.0%})"


class MemoryPanel(Vertical):
    """Shows the newest SystemSample and the memory the trainer reported in its log events."""

    DEFAULT_CSS = """
    MemoryPanel {
        height: 1fr;
        padding: 0 1;
        & > Static { height: auto; }
    }
    """

    def __init__(self, forecast: dict[str, Any] | None = None, *, store: Any = None, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.store = store  # the run's metrics store: each step's batch and memory (#37)
        self._batch_reading: tuple[tuple[Any, ...], list[Text]] = ((), [])
        self.sample: SystemSample | None = None
        self.trainer: Log | None = None
        self.phases: dict[str, dict[str, int]] = {}  # measured per phase (memory_phase events, rank 0)
        self.forecast = forecast
        self._texts: list[Text] = []
        self.shown_view: tuple[Any, ...] | None = None  # the figures as printed, to skip unchanged repaints

    def show(self, sample: SystemSample | None, last_log: Log | None, phases: Iterable[MemoryPhase] = ()) -> None:
        self.sample, self.trainer = sample, last_log
        self.phases = {}
        for event in phases:
            keep_phase(self.phases, event)
        view = self._view()
        if view != self.shown_view:
            self.shown_view = view
            self._show_lines(self._lines(view))

    def compose(self) -> ComposeResult:
        for _ in range(MAX_LINES):
            yield Static("", markup=False)

    def on_mount(self) -> None:
        self._show_lines(self._lines(self._view()))

    @property
    def content(self) -> Group:
        """What the panel shows, as one renderable."""
        return Group(*self._texts)

    def _show_lines(self, texts: list[Text]) -> None:
        self._texts = texts
        for line, widget in enumerate(self.query_children(Static)):
            text = texts[line] if line < len(texts) else Text("")
            show_text(widget, text)
            widget.display = line < len(texts)

    def _view(self) -> tuple[Any, ...]:
        """Every figure the panel prints, as printed: (gpu error, gpu rows, host rows, text lines)."""
        sample = self.sample
        lines = tuple((line.plain, str(line.style))
                      for line in self._trainer_lines() + self._forecast_lines() + self._batch_lines())
        if sample is None:
            return None, (), (), lines
        gpus = tuple(self._gpu_row(gpu) for gpu in sample.gpus)
        rss = "no process alive" if sample.run_rss is None else f"{size(sample.run_rss)} RSS"
        host = (("host RAM", _share(sample.host_used, sample.host_total)),
                ("run tree", f"{rss} ({len(sample.run_pids)} proc)"))
        return sample.gpu_error or "", gpus, host, lines

    @staticmethod
    def _lines(view: tuple[Any, ...]) -> list[Text]:
        gpu_error, gpus, host, lines = view
        parts: list[Text] = []
        if gpu_error is None:
            parts.append(Text("sampling...", style="dim"))
        else:
            if gpu_error:
                parts.append(Text(gpu_error, style="yellow"))
            for rows in (gpus, host):
                if rows:
                    parts.extend(Text(line) for line in _grid(rows))
        parts.extend(Text(plain, style=style) for plain, style in lines)
        return parts[:MAX_LINES]

    @staticmethod
    def _gpu_row(gpu: Any) -> tuple[str, ...]:
        util = "-" if gpu.utilization is None else f"{gpu.utilization}%"
        run = "run n/a" if gpu.run_memory is None else f"run {size(gpu.run_memory)}"
        return f"GPU{gpu.index}", _share(gpu.memory_used, gpu.memory_total), f"util {util}", run

    def _forecast_lines(self) -> list[Text]:
        """The planner's forecast stored at launch, against the newest measured peak."""
        forecast = self.forecast or {}
        if "per_device_total_bytes" not in forecast:
            return [Text(f"forecast: {forecast.get('error', 'none stored for this run')}", style="dim")]
        peak_phase = str(forecast.get("peak_phase", "")).replace("_", " ")
        lines = [Text(f"forecast {size(forecast['per_device_total_bytes'])} per GPU"
                      + (f" (peak: {peak_phase})" if peak_phase else "")
                      + f", {size(forecast['host_total_bytes'])} host", style="dim")]
        peaks = [c.max_reserved for c in (self.trainer.cuda or [] if self.trainer else []) if c.max_reserved]
        if peaks:
            # the trainer's peaks restart at each phase (#26): a log's peak is its stretch of steady steps
            steady = phase_forecasts(forecast).get("steady_step")
            expected = (steady or comparable_forecasts(forecast))["cuda_max_reserved_bytes"]
            error = error_percent(expected, max(peaks))
            lines.append(Text(f"peak reserved {size(max(peaks))} vs forecast {size(expected)}"
                              + (f" ({error:+.0f}%)" if error is not None else "")))
        return lines + self._phase_lines(forecast)

    def _phase_lines(self, forecast: dict[str, Any]) -> list[Text]:
        """Forecast vs measured for each phase the run has measured (#26), with the forecast's error."""
        rows = compare_phases(forecast, self.phases)
        kind, label = next(((k, text) for k, text in PHASE_KINDS if any(r["kind"] == k for r in rows)), ("", ""))
        chosen = [row for row in rows if row["kind"] == kind]
        if not chosen:
            return []
        table = [("phase", label, "forecast", "error")]
        for row in chosen:
            error = row["error_percent"]
            table.append((row["phase"].replace("_", " "), size(row["measured_bytes"]), size(row["forecast_bytes"]),
                          "-" if error is None else f"{error:+.0f}%"))
        return [Text(line) for line in _grid(tuple(table))]

    def _batch_lines(self) -> list[Text]:
        """When the longest batch lands (forecast at launch) and what the steps measured: the peak and the batch
        that brought it, memory creeping at equal length (#37)."""
        predicted = (self.forecast or {}).get("longest_batch") or {}
        lines = [Text(f"forecast: {predicted['line']}", style="dim")] if predicted.get("line") else []
        store = self.store
        if store is None or not store.memory_steps:
            return lines
        key = (len(store.memory_steps), store.memory_steps[-1], store.memory_limit)
        if key != self._batch_reading[0]:
            points = [StepMemory(*step) for step in store.memory_steps]
            measured = [Text(found.line()) for found in (peak(points), creep(points, store.memory_limit,
                                                                              store.memory_kind)) if found]
            self._batch_reading = (key, measured)
        return lines + self._batch_reading[1]

    def _trainer_lines(self) -> list[Text]:
        """What the training process said about itself in its newest log event."""
        last = self.trainer
        lines: list[Text] = []
        if last is None:
            return lines
        if last.rss_bytes is not None:
            lines.append(Text(f"trainer RSS {size(last.rss_bytes)} (rank 0, at its last log)", style="dim"))
        for cuda in last.cuda or []:
            lines.append(Text(f"cuda:{cuda.device} allocated {size(cuda.allocated)}, "
                              f"reserved {size(cuda.reserved)}, peak {size(cuda.max_reserved)}", style="dim"))
        return lines
