"""The file system, done once: atomic writes and the file lock.

Every module that writes a file the app or another process reads (profiles, run state, the
oracle's cache, the index, exports) writes it here, so a reader sees the old file or the new
one, never half of one. Every lock between processes (a run folder's controller lock, an
oracle cache key) is `file_lock`.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOCK_POLL_S = 0.1


class LockTimeout(Exception):
    """Another process held the lock longer than the caller would wait."""


class LockCancelled(Exception):
    """The caller's `cancelled()` turned true while it waited for the lock."""


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Readers see the old file or the new one, never half of one. `mode` (e.g. 0o755 for a script):
    the new file's permissions; without it, a rewritten file keeps its permissions and a new one gets
    0o666 less the umask, as `open` would give it (a team's shared data folder stays readable to all)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_bytes_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """write_text_atomic for bytes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode if mode is not None else _mode_for(path))
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The permissions a rewrite of `path` keeps: its own, or for a new file 0o666 less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


@contextmanager
def file_lock(path: Path, *, wait: float | None = None, cancelled: Callable[[], bool] | None = None,
              make_parent: bool = False) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created; never deleted: deleting races a waiter).

    `wait`: seconds to wait before LockTimeout (None: as long as it takes). `cancelled`: polled
    while waiting; LockCancelled once it is true. OSError when the file cannot be opened.
    """
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        _acquire(handle, path, wait, cancelled)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[bytes], path: Path, wait: float | None, cancelled: Callable[[], bool] | None) -> None:
    if wait is None and cancelled is None:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if cancelled is not None and cancelled():
                raise LockCancelled(f"cancelled while waiting for {path.name}") from None
            if deadline is not None and time.monotonic() > deadline:
                raise LockTimeout(f"{path} is held by another process") from None
            time.sleep(LOCK_POLL_S)


def tree_size(folder: Path) -> int:
    """Bytes of every file under `folder` (links not followed); FileNotFoundError when the folder itself is
    gone, while a file or subfolder deleted during the walk is simply not counted."""
    total = 0
    stack = [folder]
    first = True
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except FileNotFoundError:
            if first:
                raise
            continue
        first = False
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return total
