"""One line of memory forecast under the form, from the memory planner (backend/estimate/).

The line owns its forecast: the screen binds `question` (the profile, its folder, the hardware)
and `forecast_summary` runs in a thread worker (it reads config.json). Until a forecast is
there the line says it is coming: never a number that was not computed. The line holds its row
from the first frame, so the forecast arriving does not re-lay out (and repaint) the workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.reactive import var
from textual.widgets import Static

from backend.core.units import gib
from backend.hardware.machine import HardwareInfo, trains_on_cpu
from tui.widgets.quiet import show_text
from tui.worker_failures import WorkerFailures

if TYPE_CHECKING:  # the line is in the workspace's first frame; the profile's models come after it (#41)
    from backend.profile import LaunchProfile


def forecast_summary(profile: LaunchProfile, model_dir: Path | None, hardware: HardwareInfo,
                     base_dir: Path | None = None) -> str:
    """'Memory forecast: …' for the profile, held to the profile's own GPUs (the planner is imported
    here, in the worker, not at start-up)."""
    from backend.estimate.fit import gpu_memory_for
    from backend.estimate.forecast import forecast_for_profile

    if model_dir is None or not (model_dir / "config.json").is_file():
        return "Memory forecast: needs the model's config.json (a local folder, or a cached hub model)."
    memory = gpu_memory_for(hardware.gpus, profile.distribution.gpu_ids)
    on_cpu = trains_on_cpu(profile.distribution.device, hardware)
    try:
        result = forecast_for_profile(profile, model_dir, base_dir=base_dir, gpu_memory_bytes=memory, on_cpu=on_cpu)
    except Exception as err:  # the planner refusing a profile is shown, never fatal
        return f"Memory forecast: unavailable ({err})."
    return describe_forecast(_as_dict(result), hardware, on_cpu=on_cpu)


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    if hasattr(result, "to_json"):
        return result.to_json()
    return {}


def describe_forecast(data: dict[str, Any], hardware: HardwareInfo, *, on_cpu: bool) -> str:
    """One line from the planner's JSON, compared with the hardware the screen describes."""
    if "error" in data:
        return f"Memory forecast: unavailable ({data['error']})."
    device = data.get("per_device_total_bytes")
    host = data.get("host_total_bytes")
    if device is None:
        return "Memory forecast: the planner returned no per-device total."
    host_text = f"host RAM {gib(host, 2)} GiB" if host is not None else ""
    evidence = f" · {_host_evidence(data)}" if host_text else ""
    if on_cpu:
        ram = f" of {gib(hardware.ram_total_bytes, 0)} GiB" if host is not None else ""
        return f"Memory (CPU run): {host_text}{ram} · on a GPU: {gib(device, 2)} GiB per GPU{evidence}"
    parts = [f"Memory: {gib(device, 2)} GiB per GPU"]
    if data.get("peak_phase"):
        parts[0] += f" (peak: {data['peak_phase'].replace('_', ' ')})"
    fit = data.get("fit")
    if isinstance(fit, dict) and fit.get("gpu_memory_bytes"):
        # the planner's own verdict (fits / tight / does not fit), for the profile's GPUs
        memory = fit["gpu_memory_bytes"]
        parts.append(f"{fit['status']} in {gib(memory, 0)} GiB ({100 * device / memory:.0f}%)")
    if host_text:
        parts.append(host_text)
    return " · ".join(parts) + evidence


def _host_evidence(data: dict[str, Any]) -> str:
    """Where the host terms came from, short for one line (#37): 'host baseline: 0.60 GiB measured over 3 runs',
    else 'textbook host terms' (`workbench estimate` says why and names the runs)."""
    lines = (data.get("request") or {}).get("calibration") or [""]
    first = str(lines[0])
    return first.split(" on this machine")[0] if first.startswith("host baseline:") else "textbook host terms"


@dataclass(frozen=True)
class ForecastQuery:
    """What a forecast depends on (a copy of the profile: the form's own keeps changing)."""

    profile: LaunchProfile
    base_dir: Path
    hardware: HardwareInfo


WAITING = Text("Memory forecast: waiting for the hardware and the model…", style="dim")


class MemoryLine(WorkerFailures, Static):
    """The forecast, or what it waits for."""

    DEFAULT_CSS = """
    MemoryLine {
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        padding: 0 1;
        background: $panel;
    }
    """

    question: var[ForecastQuery | None] = var(None, init=False)  # what to show: set by the screen (data_bind)
    """The profile to forecast (bound to the screen's)."""
    summary: var[str | None] = var(None)
    """The forecast text; None while there is none."""

    class Forecast(Message, bubble=False):
        def __init__(self, query: ForecastQuery, summary: str | None) -> None:
            super().__init__()
            self.question, self.summary = query, summary

    def watch_question(self, query: ForecastQuery | None) -> None:
        if query is not None:
            self._forecast(query)

    def watch_summary(self, summary: str | None) -> None:
        show_text(self, WAITING if summary is None else Text(summary))

    def show_failure(self, message: str) -> None:
        self.summary = f"✗ Memory forecast: {message} (ctrl+r: retry)"

    def retry(self) -> None:
        if self.question is not None:
            self._forecast(self.question)

    @work(thread=True, exclusive=True, group="memory", exit_on_error=False, description="Memory forecast")
    def _forecast(self, query: ForecastQuery) -> None:
        from tui.screens.launch_support import model_dir_of

        model_dir = model_dir_of(query.profile.model.source, query.base_dir)
        summary = forecast_summary(query.profile, model_dir, query.hardware, query.base_dir)
        self.post_message(self.Forecast(query, summary))

    @on(Forecast)
    def _forecasted(self, event: Forecast) -> None:
        if event.question == self.question:
            self.summary = event.summary
