"""Python's cyclic collector in a process that loads torch, transformers or swift.

Loading them leaves about 600,000 objects the collector tracks, all of which live as long as the process.
Two costs follow, both measured by bench/collector.py:
- while they load, the collector's passes walk what has loaded so far again and again: 1.2-2 s of the
  ~6 s that importing swift's entry points takes on two cores (`paused_while_loading`);
- at the end, Python's last full collections walk all of them once more: 1.5 s of a 2-step training's
  8 s (`skip_last_collections`).
Freezing them (`gc.freeze`) takes them out of every later pass; nothing is lost, since they were never
going to be garbage (the cycles that were are freed by one pass first). Files are still closed and flushed at
the end by the usual teardown.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_while_loading() -> Iterator[None]:
    """No collection while the block loads the libraries (and what it builds with them); then one pass over
    what the block made, and what is still alive is frozen; the collector runs again. Nested use is one pause."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # paused, nothing the block made left the youngest generation: one pass there frees its garbage
            # cycles (a model's tensors among them, maybe), which freezing would otherwise keep for good
            gc.collect(0)
            gc.freeze()
            gc.enable()


def skip_last_collections() -> None:
    """Registered once: the exit handlers registered before this one run after it, so call it early
    in a process's life (in the trainer: when the plugin's callback is built)."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
