"""Whether a dataset file may be read at all, asked before anything opens or parses it (ground floor).

A FIFO named `x.jsonl` makes `open()` wait forever; a symlink loop ends in an OSError deep inside a
reader; a 1 GB line is read whole into memory by every line reader; a row nested 50,000 deep makes
json recursion fail (and crashes swift's child). Each check here is bounded: `file_problem` is one
`stat` per file, `content_problem` reads the file once in fixed-size chunks and parses one line at a time.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from backend.core.units import MIB, size

MAX_LINE_BYTES = 32 * MIB  # far above any real row; a longer line is a broken or hostile file
MAX_DEPTH = 100  # a chat row with tool schemas nests about 10 deep
MAX_FOLDER_FILES = 10_000
CHUNK = MIB
FOLDER_SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".parquet")  # what swift's loader reads in a folder
LINE_FORMATS = (".jsonl", ".txt", ".csv")  # one row a line (a .json array may be one long line)

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def file_problem(path: Path) -> str | None:
    """Why `path` (a dataset file, or a folder of them) must not be opened; None when it may be, or when it
    does not exist (the caller says that)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None if not os.path.islink(path) else f"{path} is a symbolic link to nothing"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path} is a symbolic link loop"
        return f"{path} cannot be read: {err.strerror or err}"
    if stat.S_ISDIR(mode):
        return _folder_problem(path)
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{path} is {kind}, not a regular file: reading it could wait forever"


def _folder_problem(folder: Path) -> str | None:
    seen, data = 0, False
    for root, dirs, files in os.walk(folder):
        for name in [*files, *dirs]:
            seen += 1
            if seen > MAX_FOLDER_FILES:
                return None
            entry = Path(root) / name
            if name in dirs and not entry.is_symlink():
                continue  # os.walk goes into it
            problem = file_problem(entry) if name in files else _link_problem(entry)
            if problem:
                return problem
            data = data or (name in files and entry.suffix.lower() in FOLDER_SUFFIXES)
    if not data:  # datasets' own error names a functools.partial, not the folder's problem
        return f"{folder} holds no dataset file ({', '.join(FOLDER_SUFFIXES)})"
    return None


def _link_problem(entry: Path) -> str | None:
    try:
        os.stat(entry)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{entry} is a symbolic link loop"
    return None


def bounded_lines(handle: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line without its newline) of a binary file; None for a line longer than `limit` bytes,
    which is skipped in chunks, never held whole."""
    number = 0
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) <= limit or line.endswith(b"\n"):
            yield number, line.rstrip(b"\r\n")
            continue
        while line and not line.endswith(b"\n"):  # the rest of the long line
            line = handle.readline(CHUNK)
        yield number, None


def too_long(number: int, limit: int = MAX_LINE_BYTES) -> str:
    return f"line {number} is longer than {size(limit)}: too long to read as one row"


def depth_problem(record: Any, limit: int = MAX_DEPTH) -> str | None:
    """Whether a parsed row nests deeper than `limit` (counted without recursion)."""
    stack = [(record, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return f"nested deeper than {limit} levels: too deep"
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


def parse_row(text: str | bytes) -> Any:
    """json.loads, with a nesting past the interpreter's recursion limit as a ValueError that says so."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels: too deep") from None


def content_problem(path: Path) -> str | None:
    """The first line of a line-per-row dataset file (or of a folder's) that is too long or, for JSON lines,
    too deep; None when every line is within bounds. Reads the file once, a chunk at a time."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in LINE_FORMATS and p.is_file())
        return next((found for file in files[:MAX_FOLDER_FILES] if (found := content_problem(file))), None)
    if path.suffix.lower() not in LINE_FORMATS:
        return None
    with open(path, "rb") as handle:
        for number, line in bounded_lines(handle):
            if line is None:
                return f"{path}: {too_long(number)}"
            if path.suffix.lower() != ".jsonl" or not line.strip():
                continue
            try:
                found = depth_problem(parse_row(line))
            except ValueError as err:  # not JSON (swift's loader says so itself), or too deep
                found = str(err) if "too deep" in str(err) else None
            if found:
                return f"{path}: line {number} is {found}"
    return None


def hostile_dataset(refs: list[str]) -> str | None:
    """The first problem of the local files among swift's dataset references (absolute paths, `#N` samples,
    hub ids), before swift or the cache key's read opens them; None when every one may be read."""
    for ref in refs:
        path = Path(ref.partition("#")[0])
        if not path.is_absolute():
            continue  # a hub id
        try:
            problem = file_problem(path) or (content_problem(path) if path.exists() else None)
        except OSError as err:
            problem = f"{path} cannot be read: {err.strerror or err}"
        if problem:
            return problem
    return None
