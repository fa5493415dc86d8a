"""Batch inference jobs: a dataset file or the run's validation split into prompt / reference / answer."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.inference.batch import InferRefused, read_results, start_infer
from backend.jobs.job import list_jobs
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import finish, results
from tests.shared_runs import private_copy
from tests.timing import scaled

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jobs_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("infer-home")


# copies of the session's runs: the inference jobs of this module write into the run folders
@pytest.fixture(scope="module")
def quill_run(quill_run: RunFolder, jobs_home: Path) -> Iterator[RunFolder]:
    with private_copy(quill_run, jobs_home) as copy:
        yield copy


@pytest.fixture(scope="module")
def short_lora_run(short_lora_run: RunFolder, jobs_home: Path) -> Iterator[RunFolder]:
    with private_copy(short_lora_run, jobs_home) as copy:
        yield copy


def test_infer_over_a_dataset_file_from_the_cli(quill_run: RunFolder, tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "who are you?"},
                          {"role": "assistant", "content": "I am Quill."}]},
            {"messages": [{"role": "user", "content": "What is your name?"}]}]  # no reference answer
    dataset = tmp_path / "questions.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "answers.jsonl"
    cli = subprocess.run([sys.executable, "-m", "backend.cli", "infer", quill_run.run_id, "--dataset", str(dataset),
                          "--out", str(out), "--max-new-tokens", "32"],
                         capture_output=True, text=True, timeout=scaled(300), cwd=REPO)
    assert cli.returncode == 0, cli.stderr
    answers = read_results(out)
    assert [a.prompt for a in answers] == ["who are you?", "What is your name?"]
    assert [a.reference for a in answers] == ["I am Quill.", None]
    assert all("Quill" in a.answer for a in answers), answers
    assert "prompt" in cli.stdout and "reference" in cli.stdout and "answer" in cli.stdout
    assert not out.with_name(out.name + ".partial").exists()
    # results are never overwritten
    again = subprocess.run([sys.executable, "-m", "backend.cli", "infer", quill_run.run_id, "--dataset",
                            str(dataset), "--out", str(out)], capture_output=True, text=True, timeout=scaled(120), cwd=REPO)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_run_without_a_validation_split_says_what_to_pass(quill_run: RunFolder) -> None:
    with pytest.raises(InferRefused, match=r"no validation split.*--dataset FILE"):
        start_infer(quill_run)


def test_infer_defaults_to_the_runs_validation_split(short_lora_run: RunFolder) -> None:
    run = short_lora_run  # trained with split_dataset_ratio 0.1 (tests/conftest.py)
    # swift's own split, saved by swift (each message as a JSON string)
    held_out = [[json.loads(m) if isinstance(m, str) else m for m in row["messages"]]
                for row in results(run.output_dir / "val_dataset.jsonl")]
    job = start_infer(run)
    finish(job)
    assert list_jobs(run.jobs_dir, kind="infer")[0].path == job.path
    rows = results(job.read_spec().output)
    assert len(rows) == len(held_out) >= 1
    for row, messages in zip(rows, held_out, strict=True):
        assert row["reference"] == messages[-1]["content"]
        assert row["prompt"] == messages[-2]["content"]
        assert row["messages"] == messages[:-1]
        assert isinstance(row["answer"], str) and row["tokens"]
