"""Every wall-clock limit of the tests, scaled to the machine they run on.

A limit written in a test (`scaled(30)`) is what an idle two-core machine needs, with room to spare. On a
loaded machine (other work on the same cores) everything takes longer, so each limit is multiplied by one
factor: WORKBENCH_TEST_TIME_FACTOR when it is set, otherwise measured once at session start from the load
average per core (tests/conftest.py `pytest_configure` writes it into the environment, so the xdist
workers and every subprocess of the session use the same figure). A wait that runs out says how long it
waited, for what, and the factor it was given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

FACTOR_ENV = "WORKBENCH_TEST_TIME_FACTOR"
MAX_MEASURED_FACTOR = 8.0  # a machine slower than this should say so with WORKBENCH_TEST_TIME_FACTOR
POLL_S = 0.2

T = TypeVar("T")


def measured_factor() -> float:
    """1 on an idle machine; (load + 1) / cores when more runnable work than cores competes for them
    (the +1: this session's own work on top of the load seen before it started)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    cores = os.cpu_count() or 1
    return round(min(MAX_MEASURED_FACTOR, max(1.0, (load + 1) / cores)), 2)


def time_factor() -> float:
    """The session's factor: the environment's, or measured now (and kept for the session's children)."""
    given = os.environ.get(FACTOR_ENV, "").strip()
    if given:
        try:
            value = float(given)
        except ValueError:
            raise ValueError(f"{FACTOR_ENV}={given!r} is not a number; set e.g. {FACTOR_ENV}=2") from None
        if value <= 0:
            raise ValueError(f"{FACTOR_ENV}={given!r} must be above 0")
        return value
    value = measured_factor()
    os.environ[FACTOR_ENV] = str(value)
    return value


def scaled(seconds: float) -> float:
    """`seconds` (the limit on an idle machine) times the session's factor."""
    return seconds * time_factor()


def limit_text(seconds: float) -> str:
    """'90 s (30 s x 3.0, WORKBENCH_TEST_TIME_FACTOR)': the message part that says how long a wait was."""
    factor = time_factor()
    if factor == 1:
        return f"{seconds:g} s"
    return f"{seconds * factor:.0f} s ({seconds:g} s x {factor:g}, {FACTOR_ENV})"


def wait_until(condition: Callable[[], T], timeout: float, what: str, *, interval: float = POLL_S,
               detail: Callable[[], str] | None = None) -> T:
    """The first true value of `condition()`, polled every `interval` for up to `scaled(timeout)` seconds.

    Runs out with an AssertionError that says what it waited for and how long (plus `detail()`, e.g.
    the screen or the log it last saw)."""
    limit = scaled(timeout)
    start = time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() - start > limit:
            break
        time.sleep(interval)
    seen = f"\n{detail()}" if detail is not None else ""
    raise AssertionError(f"waited {time.monotonic() - start:.0f} s (limit {limit_text(timeout)}) for {what}{seen}")


def timed_out(what: str, timeout: float, waited: float) -> AssertionError:
    """The error of a wait that polls in its own way (async pilots, pty reads)."""
    return AssertionError(f"waited {waited:.0f} s (limit {limit_text(timeout)}) for {what}")
