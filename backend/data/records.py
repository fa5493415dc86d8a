"""Reading a dataset file's rows as a stream, in constant memory: (line number, record or RowError) for
.jsonl / .json (an array, read element by element) / .csv / .txt files or a folder of them.

The one record reader of the workbench: the format-free first look (backend/data/first_look.py) and swift's row view
(backend/data/swift_view_rows.py, mapping swift's rows back to file lines) both read through it.
Lines are bounded and rows parsed with backend/data/files.py's hostile-input checks.
"""

from __future__ import annotations

import csv
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from backend.data.files import bounded_lines, depth_problem, file_problem, parse_row, too_long

SUFFIXES = (".jsonl", ".json", ".csv", ".txt")
CHUNK = 1 << 16
MAX_ELEMENT_CHARS = 64 << 20  # a longer array element is taken as broken JSON


class RowError(ValueError):
    """Why one row cannot be trained on (the message names the fix where there is one)."""


def iter_records(path: Path, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record or RowError) for each row of a .jsonl / .json / .csv / .txt file,
    or of every such file of a folder (in name order; line numbers within each file)."""
    problem = file_problem(path)  # a FIFO would block open() forever, a symlink loop fail in it
    if problem:
        raise OSError(problem)
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(path).parts)):
            yield from iter_records(file, stop)
        return
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _iter_csv(path, stop)
        return
    if suffix == ".json":
        with open(path, encoding="utf-8", errors="replace") as handle:
            if _first_char(handle) == "[":
                handle.seek(0)
                yield from _iter_json_array(handle, stop)
                return
    with open(path, "rb") as raw:  # one row a line, each line bounded (backend/data/files.py)
        yield from _iter_lines(raw, stop, text=suffix == ".txt")


def _first_char(handle: Any) -> str:
    while True:
        chunk = handle.read(4096)
        if not chunk:
            return ""
        stripped = chunk.lstrip()
        if stripped:
            return stripped[0]


class RowTooBig(RowError):
    """A line too long or a row nested too deep to be read: swift cannot load the file."""


def _iter_lines(raw: IO[bytes], stop: threading.Event | None, *, text: bool) -> Iterator[tuple[int, Any]]:
    """Rows of a JSON-lines file, or (`text`) of a .txt file, where swift's text loader makes every line a
    row, blank ones included."""
    for number, line in bounded_lines(raw):
        if stop is not None and stop.is_set():
            return
        if line is None:
            yield number, RowTooBig(too_long(number))
            continue
        decoded = line.decode("utf-8", errors="replace")
        if text:
            yield number, {"text": decoded}
        elif decoded.strip():
            yield number, _json_row(number, decoded)


def _json_row(number: int, line: str) -> Any:
    try:
        record = parse_row(line)
    except json.JSONDecodeError as err:
        return RowError(f"not valid JSON: {err.msg} (column {err.colno})")
    except ValueError as err:  # past the recursion limit
        return RowTooBig(f"line {number} is {err}")
    deep = depth_problem(record)
    return RowTooBig(f"line {number} is {deep}") if deep else record


def _iter_json_array(handle: Any, stop: threading.Event | None) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level JSON array, decoded one at a time from a sliding buffer."""
    decoder = json.JSONDecoder()
    buffer, pos, line, eof = "", 0, 1, False

    def fill() -> bool:
        nonlocal buffer, pos
        chunk = handle.read(CHUNK)
        buffer = buffer[pos:] + chunk
        pos = 0
        return bool(chunk)

    def skip(chars: str) -> None:
        nonlocal pos, line, eof
        while True:
            while pos < len(buffer) and buffer[pos] in chars:
                line += buffer[pos] == "\n"
                pos += 1
            if pos < len(buffer) or eof:
                return
            eof = not fill()

    eof = not fill()
    skip(" \t\r\n")
    pos += 1  # the opening '['
    while True:
        if stop is not None and stop.is_set():
            return
        skip(" \t\r\n,")
        if pos >= len(buffer) or buffer[pos] == "]":
            return
        while True:
            try:
                value, end = decoder.raw_decode(buffer, pos)
                break
            except json.JSONDecodeError as err:
                if eof or len(buffer) - pos > MAX_ELEMENT_CHARS:
                    yield line, RowError(f"not valid JSON: {err.msg}; the rest of the file cannot be read")
                    return
                eof = not fill()
        start_line = line
        line += buffer.count("\n", pos, end)
        pos = end
        yield start_line, value


def _iter_csv(path: Path, stop: threading.Event | None) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.DictReader(handle)
        start = 2  # line 1 is the header
        for row in reader:
            if stop is not None and stop.is_set():
                return
            yield start, {k: v for k, v in row.items() if k is not None}
            start = reader.line_num + 1
