"""`workbench eval`: ms-swift's own `swift eval` (EvalScope's general_qa, offline) of the tiny model's base and
its LoRA checkpoint, side by side, as one tracked job; the result read back by the scoreboard (#24)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.checkpoints.board_text import text_lines
from backend.checkpoints.scoreboard import scoreboard
from backend.cli.app import full_app
from backend.jobs.job import list_jobs
from backend.rundir.layout import RunFolder

QA = Path(__file__).resolve().parents[1] / "fixtures" / "eval" / "quill_qa.jsonl"


@pytest.mark.slow
def test_swift_eval_of_base_and_tuned_side_by_side(short_lora_run: RunFolder, tmp_path: Path) -> None:
    run = RunFolder(Path(shutil.copytree(short_lora_run.path, tmp_path / short_lora_run.path.name, symlinks=True)))
    result = CliRunner().invoke(full_app(), ["eval", str(run.path), "--dataset", str(QA), "--limit", "2",
                                             "--max-new-tokens", "8"])
    [job] = list_jobs(run.jobs_dir, kind="eval")
    assert result.exit_code == 0, f"{result.output}\n{job.log_tail(4000)}"
    assert "checkpoint: checkpoint-4:" in result.output  # which checkpoint it took, and why
    # the user's file, checked and laid out in the job folder the way EvalScope reads it (4 rows, 3 shapes)
    laid = [json.loads(line) for line in (job.path / "data" / "eval.jsonl").read_text().splitlines()]
    assert laid[2] == {"query": "Who made you?", "response": "The workbench team made me."}
    assert laid[3]["response"] == "Yes, I am Quill." and laid[3]["messages"][-1]["role"] == "user"
    data = json.loads((job.path / "eval.json").read_text())
    assert (data["benchmark"], data["metric"], data["rows"], data["evaluated"]) == ("general_qa", "Rouge-L-R", 4, 2)
    base, tuned = data["models"]
    assert (base["role"], base["step"], tuned["role"], tuned["step"]) == ("base", None, "tuned", 4)
    assert base["error"] is None and tuned["error"] is None
    assert 0.0 <= base["score"] <= 1.0 and 0.0 <= tuned["score"] <= 1.0
    # swift writes eval_result.jsonl into what it evaluates: the job's linked copy, never the run's checkpoint
    assert not (run.output_dir / "checkpoint-4" / "eval_result.jsonl").exists()
    assert (job.path / "models" / "checkpoint-4" / "eval_result.jsonl").is_file()
    assert job.read_state().result == f"Rouge-L-R: {base['label']} {base['score']:.3f}, {tuned['label']} " \
                                      f"{tuned['score']:.3f} (2 rows)"
    # read back by the scoreboard: a "swift eval" column, and the base's score in the header line
    board = scoreboard(run)
    assert board.row(4).swift_eval == f"{tuned['score']:.3f}"  # type: ignore[union-attr]
    lines = text_lines(board)
    assert lines[0].endswith(f" · swift eval: base Rouge-L-R {base['score']:.3f} on quill_qa.jsonl")
    assert "swift eval" in lines[2]
