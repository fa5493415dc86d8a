"""`show` on a data dir it cannot write (read-only, full, or a file in its place) says so in one line,
never a traceback (#29 Low). A file where the folder should be stands in for all three: root writes
through permissions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[1]


def test_show_on_an_unwritable_data_dir_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "data"
    blocked.write_text("not a folder")
    result = subprocess.run([sys.executable, "-m", "backend.cli", "show", "quickstart"], capture_output=True,
                            text=True, timeout=scaled(300), check=False, cwd=REPO, env={**os.environ, "WORKBENCH_DATA_DIR": str(blocked),
                                                                   "WORKBENCH_WORKSPACE": str(blocked / "runs")})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (f"error: cannot write the config files the line points at ([Errno 20] Not a directory: "
                             f"'{blocked}/runs/previews/quickstart'); the command is not printed\n")
