"""The events file: writer from several processes, incremental reader, partial lines."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from backend.contract.event_writer import EventWriter
from backend.contract.events import SCHEMA_VERSION, EventReader, read_all


def test_writer_lines_have_version_type_time_rank(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path / "events.jsonl", rank=3)
    writer.write("log", step=1, loss=2.5)
    (event,) = read_all(tmp_path / "events.jsonl")
    assert event["v"] == SCHEMA_VERSION and event["type"] == "log" and event["rank"] == 3
    assert event["step"] == 1 and event["loss"] == 2.5 and event["time"] > 0


def test_reader_returns_only_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    reader = EventReader(path)
    assert reader.read_new() == []
    writer.write("log", step=1)
    writer.write("log", step=2)
    assert [e.step for e in reader.read_new()] == [1, 2]
    assert reader.read_new() == []
    writer.write("log", step=3)
    assert [e.step for e in reader.read_new()] == [3]


def test_half_written_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = json.dumps({"v": 1, "type": "log", "rank": 0, "step": 7})
    path.write_text(line[:10])
    reader = EventReader(path)
    assert reader.read_new() == []
    with open(path, "a") as handle:
        handle.write(line[10:] + "\n")
    assert [e.step for e in reader.read_new()] == [7]
    assert reader.bad_lines == 0


def test_reader_never_rereads_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    for step in range(1000):
        writer.write("log", step=step)
    reader = EventReader(path)
    reader.read_new()
    size = path.stat().st_size
    writer.write("log", step=1000)
    assert reader.offset == size
    assert [e.step for e in reader.read_new()] == [1000]


def test_garbage_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "log", "step": 1}\nnot json\n[1, 2]\n{"type": "log", "step": 2}\n')
    reader = EventReader(path)
    assert [e.step for e in reader.read_new()] == [1, 2]
    assert reader.bad_lines == 2


def _write_many(path: str, rank: int) -> None:
    writer = EventWriter(path, rank=rank)
    for step in range(500):
        writer.write("run_begin", start_step=step, output_dir="x" * 200)  # long lines: more chances to interleave


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    workers = [multiprocessing.Process(target=_write_many, args=(str(path), rank)) for rank in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    reader = EventReader(path)
    events = reader.read_new()
    assert reader.bad_lines == 0 and len(events) == 2000
    for rank in range(4):
        assert [e.start_step for e in events if e.rank == rank] == list(range(500))
