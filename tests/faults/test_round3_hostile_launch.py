"""`workbench run` with a dataset holding a row nested too deep or a line too long (#29 Medium 12): launch
refuses before anything starts, naming the file and the line (a 50,000-deep row segfaulted swift's child;
the run died later by SIGSEGV with no hint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import helpers as h
from tests.runs.helpers import quick_profile

GOOD = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})


@pytest.mark.parametrize("bad_row, what", [
    ("[" * 5000 + "]" * 5000, "line 2 is nested deeper than 100 levels: too deep"),
    (json.dumps({"messages": [{"role": "user", "content": "x" * (33 * 2**20)}]}), "line 2 is longer than"),
])
def test_a_hostile_row_refuses_the_launch_naming_file_and_line(
        workspace: Path, tmp_path: Path, bad_row: str, what: str) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(f"{GOOD}\n{bad_row}\n{GOOD}\n")
    profile = quick_profile(tmp_path, data={"train": [str(data)]})
    result = h.cli("run", str(profile), "--detach", "--workspace", str(workspace))
    h.assert_clean_exit(result, (1, 2))
    assert f"{data}: {what}" in " ".join(result.output.split())
    assert list(workspace.iterdir()) == []  # nothing was started, no run folder left
