"""Repaint only what changed: every repaint is bytes on the user's terminal, maybe over a slow SSH link.

Textual repaints a widget (and writes its whole region to the terminal) on every `update()`,
even when the new content equals the old, and its Footer rebuilds all of its keys whenever the
screen refreshes its bindings (each focus change, each screen resume), even for the same keys.
These helpers skip the update when nothing changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Footer, Static

SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def show_text(widget: Static, content: str | Text) -> bool:
    """`widget.update(content)` unless it already shows exactly that; True when it changed."""
    if widget.content == content:
        return False
    widget.update(content)
    return True


class QuietFooter(Footer):
    """A Footer that rebuilds its keys only when the bindings it would show changed."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: tuple[object, ...] | None = None  # the bindings its keys were last built for

    def bindings_changed(self, screen: Screen) -> None:
        active = screen.active_bindings
        palette = active.get(screen.app.COMMAND_PALETTE_BINDING)  # shown at the right although show=False
        shown = tuple((b.binding, b.enabled, b.tooltip) for b in active.values() if b.binding.show or b is palette)
        if shown == self._shown:
            return
        if screen.app.app_focus and self.is_attached and screen is self.screen:  # Footer rebuilds only then
            self._shown = shown
        super().bindings_changed(screen)


def sparkline(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters, lowest to highest (the low-bandwidth plots)."""
    shown = [v for v in values if v == v and abs(v) != float("inf")][-max(1, width):]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = high - low
    top = len(SPARK_LEVELS) - 1
    return "".join(SPARK_LEVELS[round((v - low) / span * top) if span else top // 2] for v in shown)
