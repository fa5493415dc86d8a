"""The first look at a dataset (backend/inspect_data.py): rows, rows swift drops with line numbers, lengths.

That it agrees with swift itself on every documented format: tests/data_inspect/test_preview_agrees.py."""

from __future__ import annotations

import json
import threading
import tracemalloc
from pathlib import Path

import pytest

import backend.data_records as data_records
from backend.data_formats import to_messages
from backend.data_records import RowError
from backend.inspect_data import inspect_ref, parse_ref, scan_dataset
from backend.paths import BUILTIN_DATASETS

SHIPPED = BUILTIN_DATASETS["self-cognition"]
GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _lines(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_malformed_rows_name_their_line_and_reason(tmp_path: Path) -> None:
    rows = [
        json.dumps(GOOD),
        '{"messages": [{"role": "user", "content": "hi"}',  # 2: cut short
        json.dumps({"messages": []}),  # 3: nothing to keep
        json.dumps({"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]}),  # 4
        "",  # 5: blank lines are not rows
        json.dumps({"messages": [{"role": "bot", "content": "q"}, {"role": "assistant", "content": "  "}]}),  # 6
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),  # 7: swift keeps it
        json.dumps({"messages": [{"role": "user", "content": None}, {"role": "assistant", "content": "r"}]}),  # 8
        json.dumps([1, 2]),  # 9
    ]
    scan = scan_dataset(_lines(tmp_path / "mixed.jsonl", rows))
    assert (scan.rows, scan.malformed_count, scan.total_rows) == (3, 5, 8)
    found = {bad.line: bad.reason for bad in scan.malformed}
    assert found.keys() == {2, 3, 4, 8, 9}
    assert found[2].startswith("not valid JSON")
    assert scan.unreadable == "line 2 is not valid JSON: swift's loader refuses the whole file"
    assert found[3] == "`messages` is empty: swift keeps nothing of this row"
    assert "role 'wizard', which swift rejects" in found[4]
    assert found[8] == "message 1 (user) has no content"
    assert "JSON object" in found[9]
    assert scan.preview[1] == [{"role": "assistant", "content": "q"}, {"role": "assistant", "content": "  "}]


def test_query_response_rows_and_a_history_that_is_not_a_list(tmp_path: Path) -> None:
    rows = [json.dumps({"query": "q", "response": "r", "system": "s"}),
            json.dumps({"query": "q", "response": "r", "history": "not a list"}),
            json.dumps({"query": "q2", "response": "r2", "history": "[['q1', 'r1']]"})]
    scan = scan_dataset(_lines(tmp_path / "qr.jsonl", rows))
    assert scan.layout == "response" and scan.rows == 2
    assert [b.line for b in scan.malformed] == [2] and "`history`" in scan.malformed[0].reason
    assert scan.preview[0] == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                               {"role": "assistant", "content": "r"}]
    assert scan.preview[1][:2] == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "r1"}]


def test_nothing_a_row_holds_raises(tmp_path: Path) -> None:
    odd = [{"messages": "{not json"}, {"messages": [1, 2]}, {"conversation": [{"human": "x"}]},
           {"query": "q", "response": "r", "history": [["only one"]]}, {"query": "q", "history": 5}]
    scan = scan_dataset(_lines(tmp_path / "odd.jsonl", [json.dumps(o) for o in odd]))
    assert scan.total_rows == 5
    for record in odd:
        try:
            to_messages(record)
        except RowError:
            pass


def test_shipped_dataset_is_clean(tmp_path: Path) -> None:
    lines = [line for line in SHIPPED.read_text(encoding="utf-8").splitlines() if line.strip()]
    scan = scan_dataset(SHIPPED, preview_rows=2)
    assert scan.rows == len(lines) and scan.malformed_count == 0
    assert scan.preview[0] == json.loads(lines[0])["messages"]
    lengths = sorted(sum(len(m["content"]) for m in json.loads(line)["messages"]) for line in lines)
    assert (scan.chars.minimum, scan.chars.maximum, scan.chars.count) == (lengths[0], lengths[-1], len(lines))


def test_json_array_is_streamed_element_by_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_records, "CHUNK", 7)  # elements straddle many reads
    # one layout per file, as swift decides it from the columns; sharegpt roles inside `messages`
    elements = [GOOD, {"nope": 1}, {"messages": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(elements, indent=2), encoding="utf-8")
    scan = scan_dataset(path)
    assert (scan.rows, scan.malformed_count) == (2, 1)
    text_lines = path.read_text().splitlines()
    bad_line = scan.malformed[0].line
    assert text_lines[bad_line - 1].strip() == "{" and '"nope"' in text_lines[bad_line]
    assert scan.preview[1] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    path.write_text('[{"messages": [}', encoding="utf-8")
    broken = scan_dataset(path)
    assert broken.malformed_count == 1 and "cannot be read" in broken.malformed[0].reason


def test_csv_rows_keep_their_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text('query,response\nhello,"two\nlines"\nempty,\n', encoding="utf-8")
    scan = scan_dataset(path)
    assert scan.rows == 2 and scan.malformed == []  # an empty answer is still a row to swift
    assert scan.preview[0][1]["content"] == "two\nlines"


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
    assert scan.rows == 40_000 and scan.chars.maximum == 1000
    assert peak < size / 10, f"peak {peak} bytes for a {size} byte file"


def test_scan_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    scan = scan_dataset(SHIPPED, stop=stop)
    assert not scan.complete and scan.rows == 0


def test_references(tmp_path: Path) -> None:
    assert parse_ref("builtin:self-cognition#20").path == SHIPPED and parse_ref("builtin:self-cognition#20").sample == 20
    hub = parse_ref("AI-ModelScope/alpaca-gpt4-data-en#500")
    assert (hub.kind, hub.sample, hub.path) == ("hub", 500, None)
    assert "does not exist" in parse_ref("./missing.jsonl").problem
    assert "#N" in parse_ref("data.jsonl#x").problem
    assert "unknown built-in" in parse_ref("builtin:nothing").problem
    (tmp_path / "folder").mkdir()
    assert parse_ref(str(tmp_path / "folder")).kind == "local"  # swift reads folders
    with pytest.raises(RowError, match="no question and no answer"):
        to_messages({"nothing": "here"})


def test_sample_count_is_what_swift_uses(tmp_path: Path) -> None:
    path = _lines(tmp_path / "six.jsonl", [json.dumps(GOOD)] * 6)
    assert inspect_ref(f"{path}#3").rows_used == 3  # the old preview said 6
    assert inspect_ref(f"{path}#10").rows_used == 10  # swift repeats rows to reach N
    assert inspect_ref(str(path)).rows_used == 6
