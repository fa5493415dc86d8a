"""backend.core.tail: the one reader of growing files, and the readers built on it (events, `logs -f`)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.contract.events import EventReader
from backend.core.tail import Tail, first_lines, last_lines, lines_before, mark

LOG = '{"v":1,"type":"log","time":1.0,"rank":0,"step":%d}\n'


def test_only_whole_lines_and_a_torn_last_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo\nthr")
    tail = Tail(path)
    assert tail.read_lines() == [b"one", b"two"] and tail.offset == 8
    assert tail.read_lines() == [] and tail.offset == 8
    with open(path, "ab") as handle:
        handle.write(b"ee\n")
    assert tail.read_lines() == [b"three"] and tail.offset == 14


def test_lines_up_to_an_offset_then_the_rest(tmp_path: Path) -> None:
    """`end`: what a file held at a moment (the alerts panel's "before the monitor opened"), read in small bites."""
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo\nthree\n")
    tail = Tail(path)
    assert tail.read_all_lines(max_bytes=2, end=8) == [b"one", b"two"] and tail.offset == 8
    assert tail.read_all_lines(end=8) == []
    assert tail.read_all_lines(end=9) == [b"three"]  # a line across the offset had begun: read whole
    assert tail.read_all_lines() == [] and tail.offset == 14


def test_a_read_that_takes_nothing_ends_the_loop(tmp_path: Path) -> None:
    """The never-spin property: a torn last line longer than any read size is waited for, not looped over."""
    path = tmp_path / "f"
    path.write_bytes(b"whole\n" + b"x" * 5000)  # a torn line of 5,000 bytes (a crash mid-write)
    tail = Tail(path, max_line=1 << 20)
    reads = 0
    while tail.has_more():
        tail.read_lines(max_bytes=1024)
        reads += 1
        assert reads < 10, "the reader spins on a torn line"
    assert reads == 2 and tail.offset == 6 and tail.unread_bytes() == 5000
    with open(path, "ab") as handle:  # the file changed: there may be something to take again
        handle.write(b"\n")
    assert tail.has_more() and tail.read_lines(max_bytes=1024) == [b"x" * 5000]


def test_a_line_over_the_bound_is_skipped_and_counted_not_buffered(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\n" + b"y" * 3000)  # over the bound and not even ended yet
    tail = Tail(path, max_line=1024)
    assert tail.read_lines() == [b"a"]
    assert tail.read_lines() == [] and tail.long_lines == 1 and tail.offset == 3002  # consumed, counted once
    with open(path, "ab") as handle:
        handle.write(b"y" * 500 + b"\nb\n")
    assert tail.read_lines() == [b"b"] and tail.long_lines == 1


def test_events_reader_counts_an_endless_line_as_damaged(tmp_path: Path) -> None:
    """A garbage line of 2 MiB with no newline (a binary file appended by mistake): counted at once,
    and the events after it are read."""
    path = tmp_path / "events.jsonl"
    path.write_bytes((LOG % 1).encode() + b"\x00" * (2 << 20))
    reader = EventReader(path)
    assert [e.step for e in reader.read_new()] == [1]
    assert reader.bad_lines == 1
    with open(path, "ab") as handle:
        handle.write(b"\n" + (LOG % 2).encode())
    assert [e.step for e in reader.read_new()] == [2] and reader.bad_lines == 1


def test_from_end_starts_at_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"first line\nsecond\nthird\n")
    assert Tail.from_end(path, 10).read_lines() == [b"third"]  # "second\n" was cut: dropped
    assert Tail.from_end(path, 13).read_lines() == [b"second", b"third"]  # starts exactly at a line
    assert Tail.from_end(path, 1000).read_lines() == [b"first line", b"second", b"third"]


def test_ends_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes("α\nbeta\ngamma\ndelta".encode())
    window = last_lines(path, 12)
    assert window.text == "gamma\ndelta" and window.cut and window.start == 8 and window.end == 19
    assert lines_before(path, window.start) == 2
    head = first_lines(path, 9)
    assert head.text == "α\nbeta\n" and head.cut
    assert last_lines(tmp_path / "missing", 10).text == ""


def test_mark_says_changed(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\n")
    before = mark(path)
    assert mark(path) == before
    with open(path, "ab") as handle:
        handle.write(b"b\n")
    assert mark(path) != before and mark(path).size == 4
    assert mark(tmp_path / "missing") is None


def test_a_text_stream_never_splits_a_character(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes("loss é".encode()[:-1])  # the writer's first write ends inside "é"
    tail = Tail(path)
    assert tail.read_text() == "loss "
    with open(path, "ab") as handle:
        handle.write("loss é".encode()[-1:] + b"\n")
    assert tail.read_text() == "é\n"


def test_logs_follow_prints_a_character_split_across_two_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`workbench logs -f`: the trainer's two writes split "é" (0xC3 0xA9); it is printed whole, once."""
    from backend.cli import runs as cli_runs
    from backend.rundir.layout import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.log_path.write_bytes(b"step 1\n")
    writes = [b"loss \xc3", b"\xa9 done\n"]  # one character, two writes
    active = {"now": True}

    def sleep(_seconds: float) -> None:  # the follower waits: the trainer writes meanwhile
        with open(folder.log_path, "ab") as handle:
            handle.write(writes.pop(0))
        active["now"] = bool(writes)

    monkeypatch.setattr(cli_runs, "find_run_or_exit", lambda _ref: folder)
    monkeypatch.setattr(cli_runs, "refresh", lambda _folder: SimpleNamespace(is_active=active["now"]))
    monkeypatch.setattr(cli_runs, "time", SimpleNamespace(sleep=sleep))
    done = threading.Event()

    def follow() -> None:
        cli_runs.logs("run", follow_log=True, lines=5)
        done.set()

    worker = threading.Thread(target=follow, daemon=True)
    worker.start()
    worker.join(10)
    assert done.is_set()
    assert capsys.readouterr().out == "step 1\nloss é done\n"
