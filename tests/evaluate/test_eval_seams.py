"""`workbench eval` where it meets files and ports (#34 item 18): a single-row dataset far over the data readers'
line bound is refused before anything starts; two evals at once never get one port; a malformed EvalScope
report is said as that model's error and the base model's score is kept. Expected values by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.evaluation import worker
from tests.scoreboard.scoreboard_helpers import fake_run, log, saved

MIB = 1024**2


def test_a_40_mib_single_row_dataset_is_refused_before_anything_starts(tmp_path: Path, isolated_runs: Path) -> None:
    run = fake_run(tmp_path, [log(2, 3.0), saved(2)], {2: True})
    data = tmp_path / "one-row.jsonl"
    with open(data, "w", encoding="utf-8") as handle:
        handle.write('{"query": "q", "response": "' + "a" * (40 * MIB) + '"}\n')
    result = CliRunner().invoke(full_app(), ["eval", str(run.path), "--dataset", str(data)])
    assert result.exit_code != 0
    assert f"--dataset {data}: line 1 is longer than 32.0 MiB: too long to read as one row" in " ".join(
        result.output.split())
    assert not run.jobs_dir.exists()


def test_a_port_another_eval_holds_is_never_given_out(isolated_runs: Path) -> None:
    answers = iter([40001, 40001, 40002])
    with worker.reserved_port(lambda: 40001) as first:
        with worker.reserved_port(lambda: next(answers)) as second:
            assert (first, second) == (40001, 40002)
    with worker.reserved_port(lambda: 40001) as again:  # let go when its swift eval ended
        assert again == 40001


def _plan(tmp_path: Path) -> Path:
    plan = {"dataset": "/data/qa.jsonl", "format": "qa", "benchmark": "general_qa", "metric": "Rouge-L-R",
            "rows": 4, "limit": None, "data_dir": str(tmp_path / "data"), "max_new_tokens": 8,
            "models": [{"role": role, "label": role, "step": step, "merged": False, "args": []}
                       for role, step in (("base", None), ("tuned", 4))]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_a_malformed_evalscope_report_keeps_the_base_score(tmp_path: Path, isolated_runs: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    reports = {"base": {"metrics": [{"name": "mean_Rouge-L-R", "score": 0.5, "num": 4}]},
               "tuned": {"metrics": [{"name": "mean_Rouge-L-R", "num": 4}]}}  # no score: not EvalScope's report

    def swift_eval(argv: list[str], cwd: Path) -> int:  # what `swift eval` leaves: its report under the output
        output = Path(argv[argv.index("--eval_output_dir") + 1])
        report = output / "native" / "20261204" / "reports" / "model" / "general_qa.json"
        report.parent.mkdir(parents=True)
        report.write_text(json.dumps(reports[output.name]))
        return 0

    monkeypatch.setattr(worker.subprocess, "call", swift_eval)
    assert worker.run_plan(_plan(tmp_path)) == 1
    result: dict[str, Any] = json.loads((tmp_path / "eval.json").read_text())
    base, tuned = result["models"]
    assert (base["score"], base["error"], result["evaluated"]) == (0.5, None, 4)
    bad = tmp_path / "tuned" / "native" / "20261204" / "reports" / "model" / "general_qa.json"
    assert tuned["score"] is None
    assert tuned["error"] == f"EvalScope's report {bad} cannot be read (KeyError: 'score')"
