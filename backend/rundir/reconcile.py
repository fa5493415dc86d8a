"""The one reconciler of runs and jobs: a folder's state.json checked against its processes.

The contract with the supervisor (backend/runs/supervise.py): it writes the folder's final state,
atomically, before it exits. So a state that still says active is concluded only when its
supervisor is proven gone (pid + start time + marker, or an earlier boot: `process.keeper_gone`),
and state.json is then read once more: a final state written just before the supervisor exited is
found there. No sleep, no guess: where the proof cannot be made (another host, no pid recorded yet,
a process not ours to read) the state is shown as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from backend.core.process_identity import Marker


class KeptState(Protocol):
    """What a state must say for reconciling: whether it is active, whether its keeper is gone."""

    @property
    def is_active(self) -> bool: ...

    def keeper_gone(self, marker: Marker) -> bool: ...


S = TypeVar("S", bound=KeptState)


def reconcile(read: Callable[[], S], marker: Marker, conclude: Callable[[S], S], state: S | None = None) -> S:
    """The state from `read` (or `state`, when the caller has just read it), or what `conclude` makes of
    it once the supervisor is proven gone, the state read again still says active, and no process of
    the folder is left."""
    state = read() if state is None else state
    if not state.is_active or not state.keeper_gone(marker):
        return state
    state = read()  # once more, after the proof: the supervisor writes its final state before it exits
    if not state.is_active or marker.processes():
        return state  # ended meanwhile; or the supervisor is gone but its work goes on (stop ends it)
    return conclude(state)
