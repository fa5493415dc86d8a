"""One line of memory forecast under the form, from the memory planner when it is installed.

`forecast_summary` runs in a worker thread (it reads config.json); the screen sets the
result on `MemoryLine.summary`. Without the planner the line stays hidden: never a number
that was not computed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.reactive import reactive
from textual.widgets import Static

from backend.command import uses_cpu
from backend.hardware import HardwareInfo
from backend.profile import LaunchProfile

GIB = 2**30


def planner_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("backend.estimate.forecast") is not None
    except ModuleNotFoundError:
        return False


def forecast_summary(profile: LaunchProfile, model_dir: Path | None, hardware: HardwareInfo) -> str | None:
    """'Memory forecast: …' for the profile, None when the planner is not installed."""
    if not planner_available():
        return None
    from backend.estimate.forecast import forecast_for_profile

    if model_dir is None or not (model_dir / "config.json").is_file():
        return "Memory forecast: needs the model's config.json (a local folder, or a cached hub model)."
    try:
        result = forecast_for_profile(profile, model_dir)
    except Exception as err:  # the planner refusing a profile is shown, never fatal
        return f"Memory forecast: unavailable ({err})."
    return describe_forecast(_as_dict(result), hardware, on_cpu=uses_cpu(profile, hardware))


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
    host_text = f"host RAM {host / GIB:.2f} GiB" if host is not None else ""
    if on_cpu:
        ram = f" of {hardware.ram_total_bytes / GIB:.0f} GiB" if host is not None else ""
        return f"Memory (CPU run): {host_text}{ram} · on a GPU: {device / GIB:.2f} GiB per GPU"
    parts = [f"Memory: {device / GIB:.2f} GiB per GPU"]
    sizes = [g.memory_total_bytes for g in hardware.gpus if g.memory_total_bytes]
    if sizes:
        smallest = min(sizes)
        verdict = "does not fit" if device > smallest else "fits"
        parts.append(f"{verdict} in {smallest / GIB:.0f} GiB ({100 * device / smallest:.0f}%)")
    if host_text:
        parts.append(host_text)
    return " · ".join(parts)


class MemoryLine(Static):
    """Hidden until there is a forecast to show."""

    summary: reactive[str | None] = reactive(None)
    """The forecast text, or None to hide the line."""

    def watch_summary(self, summary: str | None) -> None:
        self.display = summary is not None
        self.update(summary or "")
