"""One line of alerts.jsonl read as JSON values, each of its type, or why it is damaged.

The stdlib and backend.core only: `workbench status --line` (backend.watch.inbox) reads alerts every few
seconds from tmux's status bar, and backend.contract.alerts (the typed alerts) reads through this too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.core.safe_text import visible

LATEST_TIME = 1e11  # unix seconds, the year 5138: a later "time" is not one (localtime() overflows)
_OPTIONAL = {"id": str, "action": str, "run_id": str, "evidence": dict}


def alert_of(raw: bytes) -> dict[str, Any] | str | None:
    """One line of alerts.jsonl as JSON values, each of its type; a str saying why when the line is damaged
    (not JSON, a field of the wrong type); None when it is a line of another type."""
    try:
        data = json.loads(raw)
    except ValueError:  # not JSON, not UTF-8
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("type") != "alert":
        return None
    return _misfit(data) or data


def _misfit(data: dict[str, Any]) -> str | None:
    """Why an alert's fields are not of their types, or None."""
    for name in ("kind", "message"):
        if not isinstance(data.get(name), str):
            return f"field {name} is not text"
    when = data.get("time")
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not 0 <= when <= LATEST_TIME:
        return f"field time is not a time: {visible(when, limit=40)}"
    step = data.get("step")
    whole = isinstance(step, int) or (isinstance(step, float) and step.is_integer())  # 812.0 from numpy is 812
    if step is not None and (isinstance(step, bool) or not whole):
        return f"field step is not a whole number: {visible(step, limit=40)}"
    for name, kind in _OPTIONAL.items():
        if name in data and not isinstance(data[name], kind):
            return f"field {name} is of the wrong type"
    return None


def damaged_text(folder: Path, count: int, why: str) -> str:
    """'damaged: <run>/alerts.jsonl: 2 lines (field time is not a time: x); skipped'"""
    lines = "1 line" if count == 1 else f"{count} lines"
    return visible(f"damaged: {folder / 'alerts.jsonl'}: {lines} ({why}); skipped")
