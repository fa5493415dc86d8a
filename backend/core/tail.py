"""The one reader of growing files (events.jsonl, output.log, alerts.jsonl, stack dumps).

A `Tail` reads a file from a byte offset and hands out whole lines only; its offset is the end of
the last line it consumed, so a half-written last line is read again next time and no bytes are
carried between reads. What it owes every caller:

- it never spins: a read that consumed nothing ends the read, and `has_more()` stays False until
  the file changes (a torn last line, however long, is waited for once, not looped over);
- a line longer than `max_line` is skipped and counted (`long_lines`), never buffered for ever;
- text streams (`read_text`) decode with one incremental UTF-8 decoder, so a character split
  across two writes is never split on screen;
- `mark()` is a cheap "changed?" check (device, inode, size, mtime) for callers that skip
  unchanged files.

Stdlib only: the training process, the status line and the supervisor import it.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import NamedTuple

MAX_LINE_BYTES = 1 << 20  # a line longer than this is damaged (a crash, a binary file): skipped, counted
READ_BYTES = 4 << 20  # read at a time unless the caller asks otherwise


class FileMark(NamedTuple):
    """What a stat says about a file: equal marks mean "unchanged" (as far as a cheap check can tell)."""

    device: int
    inode: int
    size: int
    mtime_ns: int


def mark(path: str | Path) -> FileMark | None:
    """The file's mark, or None when it cannot be stat'ed (missing, unreadable)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return FileMark(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class Tail:
    """A growing file read from `offset`, whole lines at a time (see the module's docstring).
    A plain class: `workbench status --line` imports this, and dataclasses costs it ~12 ms."""

    def __init__(self, path: str | Path, offset: int = 0, max_line: int = MAX_LINE_BYTES):
        self.path = Path(path)
        self.offset = offset
        self.max_line = max_line
        self.long_lines = 0  # lines longer than max_line, skipped
        self._skipping = False  # inside a skipped line (or a cut first line): drop up to its newline
        self._idle_at: tuple[int, int] | None = None  # (offset, size) of a read that took nothing
        self._decoder: codecs.IncrementalDecoder | None = None
        self._buffer = bytearray()

    def __repr__(self) -> str:
        return f"Tail({str(self.path)!r}, offset={self.offset}, long_lines={self.long_lines})"

    @classmethod
    def from_end(cls, path: str | Path, window: int, max_line: int = MAX_LINE_BYTES) -> Tail:
        """A tail that starts `window` bytes before the end, at the start of the first whole line there."""
        tail = cls(Path(path), max_line=max_line)
        size = _size(tail.path)
        if size is not None and size > window:
            tail.offset = size - window
            tail._skipping = not _at_line_start(tail.path, tail.offset)
        return tail

    # ------------------------------------------------------------ whole lines

    def read_into(self, max_bytes: int = READ_BYTES) -> memoryview:
        """The next whole lines (each ending in a newline) from at most about `max_bytes` of the file, in
        a buffer reused by the next read. Empty when there is nothing whole to take (`offset` then moved
        only past a skipped line over the bound)."""
        try:
            with open(self.path, "rb") as handle:
                return self._read(handle, max(1, max_bytes))
        except FileNotFoundError:
            return memoryview(b"")

    def read_block(self, max_bytes: int = READ_BYTES) -> bytes:
        """`read_into` as bytes of its own (the caller may keep them)."""
        return bytes(self.read_into(max_bytes))

    def read_lines(self, max_bytes: int = READ_BYTES) -> list[bytes]:
        """The next whole lines, without their newlines (blank ones kept)."""
        block = self.read_into(max_bytes)
        return bytes(block[:-1]).split(b"\n") if len(block) else []

    def read_all_lines(self, max_bytes: int = READ_BYTES, end: int | None = None) -> list[bytes]:
        """Every whole line to the current end, `max_bytes` at a time; stops at a read that takes nothing. With
        `end`, only the lines that end by that byte offset (a line across it is read whole: it had begun)."""
        lines: list[bytes] = []
        while end is None or self.offset < end:
            before = self.offset
            lines += self.read_lines(max_bytes if end is None else min(max_bytes, end - before))
            if self.offset == before:
                break
        return lines

    def has_more(self) -> bool:
        """True when a read now could take something: the file is longer than the offset, and did not
        stay as it was since a read that took nothing (a torn last line waiting for its newline)."""
        size = _size(self.path)
        return size is not None and size > self.offset and self._idle_at != (self.offset, size)

    def unread_bytes(self) -> int:
        """Bytes after the offset (a torn last line included): for progress, never for a loop's end."""
        size = _size(self.path)
        return max(0, size - self.offset) if size is not None else 0

    def _read(self, handle, max_bytes: int) -> memoryview:
        size = os.fstat(handle.fileno()).st_size
        want = max_bytes
        while True:  # every turn consumes bytes or returns
            if self._skipping:
                if not self._skip_line(handle):
                    break
                continue
            got = self._fill(handle, want)
            end = self._buffer.rfind(b"\n", 0, got) + 1
            if end:
                self.offset += end
                self._idle_at = None
                return memoryview(self._buffer)[:end]
            if got >= self.max_line:  # no newline within the bound: a damaged line, dropped
                self.long_lines += 1
                self._skipping = True
            elif got < want:  # the end of the file: a line still being written
                break
            else:  # one line longer than the read: read it whole (up to the bound)
                want = min(want * 2, self.max_line)
        self._idle_at = (self.offset, size)
        return memoryview(self._buffer)[:0]

    def _skip_line(self, handle) -> bool:
        """Drop bytes up to the end of the line being skipped; False when the file ended first."""
        got = self._fill(handle, self.max_line)
        newline = self._buffer.find(b"\n", 0, got)
        self.offset += newline + 1 if newline >= 0 else got
        self._skipping = newline < 0
        return newline >= 0 or got == self.max_line

    def _fill(self, handle, want: int) -> int:
        if len(self._buffer) < want:
            self._buffer = bytearray(want)
        handle.seek(self.offset)
        return handle.readinto(memoryview(self._buffer)[:want]) or 0

    # ------------------------------------------------------------ a text stream

    def read_text(self, max_bytes: int = READ_BYTES) -> str:
        """Everything appended since the last read (partial lines too: a progress bar), decoded with one
        incremental UTF-8 decoder: a character split across two writes comes out whole, once."""
        if self._decoder is None:
            self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(max_bytes)
        except FileNotFoundError:
            return ""
        self.offset += len(chunk)
        return self._decoder.decode(chunk)


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _at_line_start(path: Path, offset: int) -> bool:
    if offset == 0:
        return True
    try:
        with open(path, "rb") as handle:
            handle.seek(offset - 1)
            return handle.read(1) == b"\n"
    except OSError:
        return True


# ---------------------------------------------------------------- ends of a file


class Window(NamedTuple):
    """Whole lines at one end of a file: their text, where they start, and whether a cut line was dropped."""

    text: str
    start: int  # byte offset of the first line shown
    cut: bool  # a partial line at the window's edge was dropped
    end: int = 0  # byte offset after the last byte read (a tail follows on from here)


def last_lines(path: str | Path, max_bytes: int) -> Window:
    """The file's last whole lines within its last `max_bytes` (a cut first line is dropped; a last line
    without its newline yet is kept: it is what a terminal shows)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return Window("", 0, False)
    end = start + len(data)
    cut = start > 0 and not _at_line_start(Path(path), start)
    if cut:
        newline = data.find(b"\n")
        start = start + newline + 1 if newline >= 0 else end
        data = data[newline + 1:] if newline >= 0 else b""
    return Window(data.decode("utf-8", errors="replace"), start, cut, end)


def first_lines(path: str | Path, max_bytes: int) -> Window:
    """The file's first whole lines within its first `max_bytes` (a cut last line is dropped)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError:
        return Window("", 0, False)
    cut = len(data) > max_bytes
    if cut:
        data = data[:max_bytes]
        data = data[:data.rfind(b"\n") + 1]
    return Window(data.decode("utf-8", errors="replace"), 0, cut, len(data))


def lines_before(path: str | Path, offset: int, chunk: int = 1 << 20) -> int:
    """How many newlines the file has before `offset` (read `chunk` bytes at a time)."""
    count = 0
    try:
        with open(path, "rb") as handle:
            done = 0
            while done < offset:
                data = handle.read(min(chunk, offset - done))
                if not data:
                    break
                count += data.count(b"\n")
                done += len(data)
    except OSError:
        return 0
    return count
