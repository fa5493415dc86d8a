"""The first look at a dataset (backend/data/first_look.py): facts of the file, no format rules — records,
lines that are not JSON with their line numbers, top-level key sets, raw lengths and a raw preview.

What swift keeps of the file is swift's own report (tests/tui/test_dataset_tab.py shows it on the Data tab)."""

from __future__ import annotations

import json
import threading
import tracemalloc
from pathlib import Path

import pytest

import backend.data.records as data_records
from backend.core.paths import BUILTIN_DATASETS
from backend.data.first_look import inspect_ref, looks_like_dataset, parse_ref, scan_dataset
from tui.widgets.dataset_details import report_text

SHIPPED = BUILTIN_DATASETS["self-cognition"]
GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _lines(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_bad_json_lines_are_named_and_key_sets_counted(tmp_path: Path) -> None:
    rows = [
        '{"messages": [{"role": "user", "content": "hi"}]}',  # 1
        '{"messages": [{"role": "user", "content": "hi"}',  # 2: cut short
        '{"messages": []}',  # 3: a fact of the file, whatever swift makes of it
        "",  # 4: blank lines are not records
        '{"query": "q", "response": "r"}',  # 5
        '{"response": "r", "query": "q2"}',  # 6: the same key set in another order
        "[1, 2]",  # 7
        "not json at all",  # 8
    ]
    scan = scan_dataset(_lines(tmp_path / "mixed.jsonl", rows))
    assert (scan.records, scan.bad_count) == (7, 2)
    assert [(b.line, b.reason) for b in scan.bad] == [
        (2, "not valid JSON: Expecting ',' delimiter (column 48)"),
        (8, "not valid JSON: Expecting value (column 1)")]
    assert dict(scan.key_sets) == {"messages": 2, "query+response": 2, "(not an object: list)": 1}
    assert scan.unreadable is None  # a line that is not JSON is named, not a guess about swift's loader
    assert scan.preview == ['{"messages": [{"role": "user", "content": "hi"}]}', '{"messages": []}',
                            '{"query": "q", "response": "r"}']
    assert scan.char_lengths == [49, 16, 31, 32, 6]
    shown = report_text(inspect_ref(str(tmp_path / "mixed.jsonl"))).plain
    assert shown.splitlines()[1:6] == [
        "7 rows, 2 not valid JSON · first look: what swift keeps comes from swift's own report",
        "  ✗ line 2: not valid JSON: Expecting ',' delimiter (column 48)",
        "  ✗ line 8: not valid JSON: Expecting value (column 1)",
        "keys: messages: 2 rows, query+response: 2 rows, (not an object: list): 1 rows",
        "characters per record: min 6, median 31, p95 49, max 49, mean 27"]
    assert shown.splitlines()[6] == 'record 1: {"messages": [{"role": "user", "content": "hi"}]}'


def test_nothing_a_row_holds_raises(tmp_path: Path) -> None:
    odd = ['{"messages": "{not json"}', '{"": 1}', "{}", '"a string"', "null", '{"k": ' + "[" * 50 + "]" * 50 + "}"]
    scan = scan_dataset(_lines(tmp_path / "odd.jsonl", odd))
    assert scan.records == 6 and scan.bad_count == 0
    assert dict(scan.key_sets) == {"messages": 1, '""': 1, "(empty object)": 1, "(not an object: str)": 1,
                                   "(not an object: NoneType)": 1, "k": 1}


def test_many_key_sets_are_bounded(tmp_path: Path) -> None:
    rows = [json.dumps({f"key{i}": i}) for i in range(30)]
    scan = scan_dataset(_lines(tmp_path / "keys.jsonl", rows))
    assert len(scan.key_sets) == 21 and scan.key_sets["(other key sets)"] == 10


def test_shipped_dataset(tmp_path: Path) -> None:
    lines = [line for line in SHIPPED.read_text(encoding="utf-8").splitlines() if line.strip()]
    scan = scan_dataset(SHIPPED, preview_rows=2)
    assert scan.records == 53 == len(lines) and scan.bad_count == 0
    assert dict(scan.key_sets) == {"messages": 53}
    assert json.loads(scan.preview[0]) == json.loads(lines[0])
    assert scan.chars is not None and scan.chars.count == 53


def test_json_array_is_streamed_element_by_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_records, "CHUNK", 7)  # elements straddle many reads
    elements = [GOOD, {"nope": 1}, {"conversations": [{"from": "human", "value": "a"}]}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(elements, indent=2), encoding="utf-8")
    scan = scan_dataset(path)
    assert (scan.records, scan.bad_count) == (3, 0)
    assert dict(scan.key_sets) == {"messages": 1, "nope": 1, "conversations": 1}
    assert scan.preview[1] == '{"nope": 1}'

    path.write_text('[{"messages": [}', encoding="utf-8")
    broken = scan_dataset(path)
    assert broken.bad_count == 1 and "cannot be read" in broken.bad[0].reason and broken.bad[0].line == 1


def test_csv_rows_keep_their_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text('query,response\nhello,"two\nlines"\nempty,\n', encoding="utf-8")
    scan = scan_dataset(path)
    assert scan.records == 2 and scan.bad == [] and dict(scan.key_sets) == {"query+response": 2}
    assert scan.preview == ['{"query": "hello", "response": "two\\nlines"}', '{"query": "empty", "response": ""}']


def test_big_file_is_not_loaded_into_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    row = json.dumps({"messages": [{"role": "user", "content": "q" * 500}, {"role": "assistant", "content": "a" * 500}]})
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(40_000):
            handle.write(row + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    scan = scan_dataset(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert scan.records == 40_000 and scan.chars is not None and scan.chars.maximum == len(row)
    assert peak < size / 10, f"peak {peak} bytes for a {size} byte file"


def test_scan_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    scan = scan_dataset(SHIPPED, stop=stop)
    assert not scan.complete and scan.records == 0


def test_what_the_picker_offers(tmp_path: Path) -> None:
    offered = {"a.jsonl": '{"anything": 1}\n', "b.jsonl": "{broken\n", "c.json": '[{"x": 1}]', "d.csv": "a,b\n1,2\n"}
    refused = {"config.json": '{"model": "x"}', "log.jsonl": '"a string"\n', "notes.txt": "hello\n", "e.py": "x = 1\n"}
    for name, body in {**offered, **refused}.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    assert {name for name in {**offered, **refused} if looks_like_dataset(tmp_path / name)} == set(offered)


def test_references(tmp_path: Path) -> None:
    assert parse_ref("builtin:self-cognition#20").path == SHIPPED and parse_ref("builtin:self-cognition#20").sample == 20
    hub = parse_ref("AI-ModelScope/alpaca-gpt4-data-en#500")
    assert (hub.kind, hub.sample, hub.path) == ("hub", 500, None)
    assert "does not exist" in parse_ref("./missing.jsonl").problem
    assert "#N" in parse_ref("data.jsonl#x").problem
    assert "unknown built-in" in parse_ref("builtin:nothing").problem
    (tmp_path / "folder").mkdir()
    assert parse_ref(str(tmp_path / "folder")).kind == "local"  # swift reads folders


def test_text_from_the_file_is_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps({"\x1b[2J": "csi \x9b2J", "[bold]x[/]": "right-to-left \u202e"}) + "\n", encoding="utf-8")
    shown = report_text(inspect_ref(str(path))).plain
    assert not any(c in shown for c in "\x1b\x9b\u202e")
    assert "keys: \\x1b[2J+[bold]x[/]: 1 rows" in shown  # keys as text, never markup
    assert '"csi \\x9b2J"' in shown and '"right-to-left \\u202e"' in shown
