"""The memory panel: each GPU (NVML), host RAM, the run's process tree, the trainer's own counters."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from backend.estimate.measured import comparable_forecasts, error_percent
from backend.system_monitor import SystemSample
from tui.widgets.units import size


def _share(used: int | None, total: int | None) -> str:
    if used is None or total is None or not total:
        return f"{size(used)} / {size(total)}"
    return f"{size(used)} / {size(total)} ({used / total:.0%})"


class MemoryPanel(Static):
    """Shows the newest SystemSample and the memory the trainer reported in its log events."""

    DEFAULT_CSS = """
    MemoryPanel {
        height: 1fr;
        padding: 0 1;
    }
    """

    def __init__(self, forecast: dict[str, Any] | None = None, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__("sampling...", name=name, id=id, classes=classes)
        self.sample: SystemSample | None = None
        self.trainer: dict[str, Any] | None = None
        self.forecast = forecast

    def show(self, sample: SystemSample | None, last_log: dict[str, Any] | None) -> None:
        self.sample, self.trainer = sample, last_log
        self.update(self._render_panel())

    def _render_panel(self) -> Group:
        parts: list[Any] = []
        sample = self.sample
        if sample is not None:
            if sample.gpu_error:
                parts.append(Text(sample.gpu_error, style="yellow"))
            if sample.gpus:
                parts.append(self._gpu_table(sample))
            host = Table.grid(padding=(0, 1))
            host.add_row("host RAM", _share(sample.host_used, sample.host_total))
            rss = "no process alive" if sample.run_rss is None else f"{size(sample.run_rss)} RSS"
            host.add_row("run tree", f"{rss} ({len(sample.run_pids)} proc)")
            parts.append(host)
        else:
            parts.append(Text("sampling...", style="dim"))
        parts.extend(self._trainer_lines())
        parts.extend(self._forecast_lines())
        return Group(*parts)

    @staticmethod
    def _gpu_table(sample: SystemSample) -> Table:
        table = Table.grid(padding=(0, 1))
        for gpu in sample.gpus:
            util = "-" if gpu.utilization is None else f"{gpu.utilization}%"
            run = "run n/a" if gpu.run_memory is None else f"run {size(gpu.run_memory)}"
            table.add_row(f"GPU{gpu.index}", _share(gpu.memory_used, gpu.memory_total), f"util {util}", run)
        return table

    def _forecast_lines(self) -> list[Text]:
        """The planner's forecast stored at launch, against the newest measured peak."""
        forecast = self.forecast or {}
        if "per_device_total_bytes" not in forecast:
            return [Text(f"forecast: {forecast.get('error', 'none stored for this run')}", style="dim")]
        lines = [Text(f"forecast {size(forecast['per_device_total_bytes'])} per GPU, "
                      f"{size(forecast['host_total_bytes'])} host", style="dim")]
        peaks = [c.get("max_reserved") for c in (self.trainer or {}).get("cuda") or [] if c.get("max_reserved")]
        if peaks:
            expected = comparable_forecasts(forecast)["cuda_max_reserved_bytes"]
            error = error_percent(expected, max(peaks))
            lines.append(Text(f"peak reserved {size(max(peaks))} vs forecast {size(expected)}"
                              + (f" ({error:+.0f}%)" if error is not None else "")))
        return lines

    def _trainer_lines(self) -> list[Text]:
        """What the training process said about itself in its newest log event."""
        last = self.trainer or {}
        lines = []
        if last.get("rss_bytes") is not None:
            lines.append(Text(f"trainer RSS {size(last['rss_bytes'])} (rank 0, at its last log)", style="dim"))
        for cuda in last.get("cuda") or []:
            lines.append(Text(f"cuda:{cuda.get('device')} allocated {size(cuda.get('allocated'))}, "
                              f"reserved {size(cuda.get('reserved'))}, peak {size(cuda.get('max_reserved'))}",
                              style="dim"))
        return lines
