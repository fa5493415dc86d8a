"""`workbench validate` names what a golden prompts path is when it is not a file (#34, low): a FIFO (reading it
would wait for ever) or a folder, instead of "does not exist". Expected messages written by hand."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from backend.cli.app import full_app
from tests.runs.helpers import quick_profile


def test_a_fifo_or_a_folder_as_golden_prompts_is_named_as_such(tmp_path: Path, isolated_runs: Path) -> None:
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    for given, said in ((fifo, f"{fifo} is a FIFO (named pipe), not a regular file: reading it could wait forever"),
                        (tmp_path, f"{tmp_path} is a folder")):
        result = CliRunner().invoke(full_app(), ["validate", str(quick_profile(tmp_path, eval={"prompts": str(given)}))])
        text = " ".join(result.output.split())
        assert result.exit_code != 0
        assert f"golden prompts file '{given}': {said}." in text
        assert "does not exist" not in text
