"""The first look (backend/inspect_data.py) never contradicts swift: on every documented format it
keeps the rows swift keeps, drops the lines swift drops, and knows the files swift cannot load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.inspect_data import inspect_ref
from tests.data_inspect.formats import Format


def test_first_look_agrees_with_swift_on_every_format(format_dir: Path, formats: list[Format],
                                                      formats_report: dict[str, Any]) -> None:
    for fmt, swift in zip(formats, formats_report["datasets"], strict=True):
        first = inspect_ref(str(format_dir / fmt.ref))
        assert first.scan is not None, fmt.name
        if swift["status"] == "unreadable":
            assert first.scan.unreadable is not None, fmt.name
            assert [b.line for b in first.scan.malformed if "JSON" in b.reason] == \
                [b["line"] for b in swift["bad_lines"]], fmt.name
            continue
        assert first.scan.unreadable is None, fmt.name
        assert first.rows_used == swift["rows"] == fmt.rows, fmt.name
        assert sorted(b.line for b in first.scan.malformed) == sorted(d["line"] for d in swift["dropped_rows"]), \
            fmt.name
        if "#" not in fmt.ref:
            assert first.scan.total_rows == swift["rows_in_file"], fmt.name
