"""Repaint only what changed: every repaint is bytes on the user's terminal, maybe over a slow SSH link.

Textual repaints a widget (and writes its whole region to the terminal) on every `update()`,
even when the new content equals the old. These helpers skip the update when nothing changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def show_text(widget: Static, content: str | Text) -> bool:
    """`widget.update(content)` unless it already shows exactly that; True when it changed."""
    if widget.content == content:
        return False
    widget.update(content)
    return True


def sparkline(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters, lowest to highest (the low-bandwidth plots)."""
    shown = [v for v in values if v == v and abs(v) != float("inf")][-max(1, width):]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = high - low
    top = len(SPARK_LEVELS) - 1
    return "".join(SPARK_LEVELS[round((v - low) / span * top) if span else top // 2] for v in shown)
