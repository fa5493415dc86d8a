"""`workbench validate` on data that trains nothing (#35): every assistant reply empty, every row dropped by
swift (said with swift's reasons, not its ZeroDivisionError), an empty file (said as empty). Each is an error
before launch. Swift reads the data in a child (seconds, cached)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import helpers as h


def _validate(folder: Path, text: str) -> tuple[int, str]:
    (folder / "d.jsonl").write_text(text)
    profile = folder / "p.toml"
    profile.write_text('name = "d"\n[model]\nsource = "builtin:tiny-qwen2"\nmodel_type = "qwen2"\ntemplate = "qwen"\n'
                       '[data]\ntrain = ["./d.jsonl"]\n[training]\nmax_length = 64\n')
    result = h.cli("validate", str(profile))
    return result.exit_code, " ".join(result.output.split())


def _rows(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.mark.slow
def test_every_assistant_reply_empty_is_an_error(tiny_model: Path, tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": ""}]}
            for i in range(4)]
    code, said = _validate(tmp_path, _rows(rows))
    assert code == 1, said
    assert ("error: [data.train] every assistant reply is empty (4 of 4 rows): there is nothing to learn (only the "
            "end-of-turn token is trained).") in said


@pytest.mark.slow
def test_every_row_dropped_is_said_with_swifts_reasons(tiny_model: Path, tmp_path: Path) -> None:
    code, said = _validate(tmp_path, _rows([{"foo": f"q{i}"} for i in range(4)]))
    assert code == 1, said
    assert ("error: [data.train] dataset './d.jsonl' cannot be read by swift: swift drops every one of its 4 rows, "
            "so nothing is left to train on (4 × ") in said
    assert "ZeroDivisionError" not in said


@pytest.mark.slow
def test_an_empty_file_is_said_as_empty(tiny_model: Path, tmp_path: Path) -> None:
    code, said = _validate(tmp_path, "\n")
    assert code == 1, said
    assert ("error: [data.train] dataset './d.jsonl' cannot be read by swift: the file is empty: there is no row to "
            "train on") in said
    assert "StopIteration" not in said
