"""A terminal that falls behind gets fewer updates, and the header says so (#17).

Over a slow SSH link sshd stops draining the pseudo-terminal once its channel window is full:
the pty's output buffer (a few KiB on Linux) fills and the app's writes block, so every frame
drawn meanwhile arrives late and the keys feel dead. While the screen on top updates periodically
(the monitor: `poll_interval` and `set_refresh`), the app asks the terminal about once a second
whether a write would block now (poll for POLLOUT on the terminal's file descriptor, no wait).
When it stays full for an update interval (at least MIN_BEHIND_SECONDS), that screen updates half
as often (down to once every MAX_SLOW_SECONDS) and its header says "slow terminal: updating every
N s"; once the terminal has been writable for CLEAR_SECONDS, one step back, until the user's own
interval is back. No other screen makes a sample do anything.

Linux's TIOCOUTQ would give the bytes still queued, but a pty's slave always answers 0 (its output
goes straight into the master's buffer); "would a write block" is what the slave side can know.
"""

from __future__ import annotations

import select
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from textual.app import ScreenStackError

SAMPLE_SECONDS = 1.0  # how often the terminal is asked while a screen updates periodically
MIN_BEHIND_SECONDS = 2.0  # full this long (and at least one update interval): updates half as often
CLEAR_SECONDS = 20.0  # writable this long: updates twice as often again, up to the user's interval
MAX_SLOW_SECONDS = 32.0  # the longest interval the pace chooses by itself


def terminal_fd() -> int | None:
    """The file descriptor Textual writes to when it is a terminal (stderr, else stdout); None otherwise."""
    for stream in (sys.__stderr__, sys.__stdout__):
        try:
            if stream is not None and stream.isatty():
                return stream.fileno()
        except (OSError, ValueError):
            continue
    return None


def write_would_block(fd: int) -> bool:
    """True when the terminal's output buffer is full: a write now would wait for the reader (sshd)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return not poller.poll(0)


@dataclass
class Pace:
    """The state machine: how many times slower than chosen the periodic updates go."""

    factor: int = 1
    behind_since: float | None = None
    clear_since: float | None = None
    changes: list[int] = field(default_factory=list)  # each new factor, in order

    def slowed(self, interval: float) -> float:
        """The interval actually used for a screen whose chosen interval is `interval`."""
        return interval * self.factor

    def observe(self, full: bool, interval: float, now: float) -> bool:
        """One sample of the terminal; True when the factor changed."""
        if full:
            self.clear_since = None
            if self.behind_since is None:
                self.behind_since = now
            elif now - self.behind_since >= max(MIN_BEHIND_SECONDS, self.slowed(interval)) \
                    and self.slowed(interval) * 2 <= max(MAX_SLOW_SECONDS, interval):
                return self._set(self.factor * 2, now)
            return False
        self.behind_since = None
        if self.factor == 1:
            return False
        if self.clear_since is None:
            self.clear_since = now
        elif now - self.clear_since >= CLEAR_SECONDS:
            return self._set(self.factor // 2, now)
        return False

    def _set(self, factor: int, now: float) -> bool:
        self.factor = factor
        self.behind_since = self.clear_since = None
        self.changes.append(factor)
        return True


class PeriodicScreen(Protocol):
    """A screen that updates every `poll_interval` seconds (the monitor); `set_refresh` changes that."""

    poll_interval: float
    sub_title: str | None

    def set_refresh(self, seconds: float) -> None: ...


def periodic(screen: object) -> PeriodicScreen | None:
    return screen if callable(getattr(screen, "set_refresh", None)) \
        and isinstance(getattr(screen, "poll_interval", None), (int, float)) else None  # type: ignore[return-value]


class TerminalPace:
    """The app's pace: while the screen on top updates periodically, asks the terminal once a second
    whether it keeps up, and stretches (then restores) that screen's update interval.

    `full` answers "is the terminal's output buffer full now" (None: no terminal to ask); by default
    the poll on the terminal's descriptor. The user's own interval (`--refresh`, key i) is what the
    app remembers; pressing i while slowed is the user's choice and ends the slowing."""

    def __init__(self, app, full: Callable[[], bool | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self._asks_terminal = full is None  # a headless app (tests) has no terminal to ask
        fd = terminal_fd() if full is None else None
        self.full = full if full is not None else ((lambda: write_would_block(fd)) if fd is not None else None)
        self.clock = clock
        self.pace = Pace()
        self.screen: PeriodicScreen | None = None
        self.chosen = 0.0  # the screen's interval as the user chose it
        self._set_interval: float | None = None  # the interval the pace gave the screen (None: the user's)
        self._own_subtitle: str | None = None

    @property
    def factor(self) -> int:
        return self.pace.factor

    def start(self) -> None:
        """Ask about once a second (only a periodically updating screen on top makes a sample do anything)."""
        if self.full is None or (self._asks_terminal and self.app.is_headless):
            return
        self.app.set_interval(SAMPLE_SECONDS, self.sample, name="terminal-pace")

    def sample(self) -> None:
        try:
            screen = periodic(self.app.screen)
        except ScreenStackError:  # no screen yet (or the app is closing)
            return
        if screen is None:
            return  # nothing updates by itself: nothing is asked
        self._follow(screen)
        full = self.full() if self.full is not None else None
        if full is not None and self.pace.observe(full, self.chosen, self.clock()):
            self._apply()

    def _follow(self, screen: PeriodicScreen) -> None:
        """A new screen on top gets the current pace; an interval the pace did not set is the user's choice."""
        if screen is not self.screen:
            self._restore_subtitle()
            self.screen, self._set_interval = screen, None
            self.chosen = screen.poll_interval
            if self.pace.factor > 1:
                self._apply()
        elif self._set_interval is not None and screen.poll_interval != self._set_interval:
            self.chosen, self._set_interval = screen.poll_interval, None  # key i while slowed
            self.pace = Pace()
            self._restore_subtitle()
        elif self._set_interval is None:
            self.chosen = screen.poll_interval

    def _apply(self) -> None:
        screen = self.screen
        if screen is None:
            return
        remembered = getattr(self.app, "refresh_seconds", None)
        seconds = self.pace.slowed(self.chosen)
        screen.set_refresh(seconds)
        if hasattr(self.app, "refresh_seconds"):
            self.app.refresh_seconds = remembered  # the slowing is this link's, not the user's setting
        if self.pace.factor == 1:
            self._set_interval = None
            self._restore_subtitle()
            return
        self._set_interval = seconds
        if self._own_subtitle is None:
            self._own_subtitle = screen.sub_title or ""
        screen.sub_title = f"slow terminal: updating every {seconds:g} s"

    def _restore_subtitle(self) -> None:
        if self.screen is not None and self._own_subtitle is not None:
            self.screen.sub_title = self._own_subtitle
        self._own_subtitle = None
