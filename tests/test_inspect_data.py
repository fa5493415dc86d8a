"""Dataset inspection (backend/inspect_data.py): rows, malformed rows with line numbers, lengths, tokens."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

import backend.inspect_data as inspect_data
from backend.inspect_data import BUILTIN_DATASETS, inspect_ref, parse_ref, scan_dataset, to_messages

REPO = Path(__file__).resolve().parents[1]
SHIPPED = BUILTIN_DATASETS["self-cognition"]
GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _lines(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_malformed_rows_name_their_line_and_reason(tmp_path: Path) -> None:
    rows = [
        json.dumps(GOOD),
        '{"messages": [{"role": "user", "content": "hi"}',  # 2: cut short
        json.dumps({"msgs": []}),  # 3: no messages
        json.dumps({"messages": [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}]}),  # 4
        "",  # 5: blank lines are not rows
        json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "  "}]}),  # 6
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),  # 7
        json.dumps({"query": "q", "response": "r", "system": "s"}),  # 8: swift's query/response layout
        json.dumps([1, 2]),  # 9
    ]
    scan = scan_dataset(_lines(tmp_path / "mixed.jsonl", rows))
    assert (scan.rows, scan.malformed_count, scan.total_rows) == (2, 6, 8)
    found = {bad.line: bad.reason for bad in scan.malformed}
    assert found.keys() == {2, 3, 4, 6, 7, 9}
    assert found[2].startswith("not valid JSON")
    assert found[3].startswith("missing `messages` (keys: msgs)")
    assert "unknown role 'bot'" in found[4]
    assert found[6] == "message 2 (assistant) has empty content"
    assert "no assistant message" in found[7]
    assert "JSON object" in found[9]
    assert scan.preview[1] == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                               {"role": "assistant", "content": "r"}]


def test_shipped_dataset_is_clean(tmp_path: Path) -> None:
    lines = [line for line in SHIPPED.read_text(encoding="utf-8").splitlines() if line.strip()]
    scan = scan_dataset(SHIPPED, preview_rows=2)
    assert scan.rows == len(lines) and scan.malformed_count == 0
    assert scan.preview[0] == json.loads(lines[0])["messages"]
    lengths = sorted(sum(len(m["content"]) for m in json.loads(line)["messages"]) for line in lines)
    assert (scan.chars.minimum, scan.chars.maximum, scan.chars.count) == (lengths[0], lengths[-1], len(lines))


def test_json_array_is_streamed_element_by_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspect_data, "CHUNK", 7)  # elements straddle many reads
    elements = [GOOD, {"instruction": "do", "input": "this", "output": "done"}, {"nope": 1},
                {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(elements, indent=2), encoding="utf-8")
    scan = scan_dataset(path)
    assert (scan.rows, scan.malformed_count) == (3, 1)
    text_lines = path.read_text().splitlines()
    bad_line = scan.malformed[0].line
    assert text_lines[bad_line - 1].strip() == "{" and '"nope"' in text_lines[bad_line]
    assert scan.preview[1][0] == {"role": "user", "content": "do\nthis"}
    assert scan.preview[2] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    path.write_text('[{"messages": [}', encoding="utf-8")
    broken = scan_dataset(path)
    assert broken.malformed_count == 1 and "cannot be read" in broken.malformed[0].reason


def test_csv_rows_keep_their_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text('query,response\nhello,"two\nlines"\nempty,\n', encoding="utf-8")
    scan = scan_dataset(path)
    assert scan.rows == 1 and [(b.line, b.reason) for b in scan.malformed] == [
        (4, "message 2 (assistant) has empty content")]
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


def test_references() -> None:
    assert parse_ref("builtin:self-cognition#20").path == SHIPPED and parse_ref("builtin:self-cognition#20").sample == 20
    hub = parse_ref("AI-ModelScope/alpaca-gpt4-data-en#500")
    assert (hub.kind, hub.sample, hub.path) == ("hub", 500, None)
    assert "does not exist" in parse_ref("./missing.jsonl").problem
    assert "#N" in parse_ref("data.jsonl#x").problem
    assert "unknown built-in" in parse_ref("builtin:nothing").problem
    with pytest.raises(ValueError, match="missing `messages`"):
        to_messages({"text": "plain"})


TRANSFORMERS_COUNTS = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
counts = []
for line in open(sys.argv[2], encoding="utf-8"):
    if line.strip():
        ids = tokenizer.apply_chat_template(json.loads(line)["messages"], tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        counts.append(len(ids))
print(json.dumps(counts))
"""


@pytest.mark.slow
def test_token_lengths_match_the_models_own_chat_template(tiny_model: Path) -> None:
    child = subprocess.run([sys.executable, "-m", "backend.inspect_data", "--tokens", str(tiny_model), str(SHIPPED)],
                           capture_output=True, text=True, check=True, cwd=REPO)
    ours = json.loads(child.stdout)
    reference = subprocess.run([sys.executable, "-c", TRANSFORMERS_COUNTS, str(tiny_model), str(SHIPPED)],
                               capture_output=True, text=True, check=True, cwd=REPO)
    assert ours["method"] == "chat template"
    assert ours["lengths"] == json.loads(reference.stdout.strip().splitlines()[-1])

    report = inspect_ref("builtin:self-cognition", model_dir=tiny_model, max_length=min(ours["lengths"]))
    assert report.tokens.stats.maximum == max(ours["lengths"])
    assert report.tokens.over_max_length == sum(1 for n in ours["lengths"] if n > min(ours["lengths"]))
