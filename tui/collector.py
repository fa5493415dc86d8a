"""Python's cyclic garbage collector in the TUI's process (no Textual here).

Textual builds a screen as tens of thousands of small objects that live as long as the screen, and
each full pass of the collector walks every live object: measured on the first frame and on the
monitor opening a 1,000,000-event run, the collector took about a fifth to a third of the CPU (#41).
So nothing is collected between the app's start and its first frame (what it builds then is not
garbage), and afterwards the young generation is collected every YOUNG_OBJECTS allocations instead of
Python's 700, so that a screen's build promotes fewer objects and triggers fewer full passes.
"""

from __future__ import annotations

import gc

YOUNG_OBJECTS = 20_000  # allocations between two collections of the youngest generation (Python: 700)
OLDER_PASSES = (20, 20)  # young passes per middle pass, middle passes per full pass (Python: 10, 10)

_paused_here = False  # the collector was on and this module paused it (one app per process at a time)


def pause_until_first_frame() -> None:
    """No collection until `first_frame_drawn` (a collector someone else turned off stays off)."""
    global _paused_here
    if gc.isenabled():
        gc.disable()
        _paused_here = True


def first_frame_drawn() -> None:
    """The collector back on, with the TUI's thresholds. Also called when the app ends before its first frame."""
    global _paused_here
    gc.set_threshold(YOUNG_OBJECTS, *OLDER_PASSES)
    if _paused_here:
        _paused_here = False
        gc.enable()
