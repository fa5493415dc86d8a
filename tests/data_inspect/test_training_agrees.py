"""A real swift training on two formats: swift's own step count equals the workbench's forecast,
rows over max_length included (swift deletes them before counting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.data.swift_view import DataRequest, ask_report
from tests.timing import scaled

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp: Path) -> tuple[Path, Path]:
    alpaca = tmp / "alpaca.jsonl"
    alpaca.write_text("".join(json.dumps({"instruction": f"Add {i} and {i}", "input": "", "output": str(2 * i)})
                              + "\n" for i in range(20)), encoding="utf-8")
    sharegpt = tmp / "sharegpt.jsonl"
    rows = [{"system": "Be brief.", "conversation": [{"human": f"Say {i}", "assistant": f"{i}"}]} for i in range(20)]
    rows.insert(7, {"conversation": [{"human": "Tell a long story", "assistant": "once upon a time " * 80}]})
    sharegpt.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return alpaca, sharegpt


@pytest.mark.slow
def test_twenty_steps_as_forecast(tiny_model: Path, tmp_path: Path) -> None:
    alpaca, sharegpt = _write(tmp_path)
    request = DataRequest(refs=[str(alpaca), str(sharegpt)], model=str(tiny_model), model_type="qwen2",
                          template="qwen", max_length=128, batch_size=2, grad_accum=1)
    report = ask_report(request)
    assert [d["rows"] for d in report["datasets"]] == [20, 21]
    assert report["datasets"][1]["truncated_row_numbers"] == [8]  # swift deletes it (strategy delete)
    assert report["steps_per_epoch"] == 20  # 40 rows / batch 2
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "swift.cli.sft", "--model", str(tiny_model), "--model_type", "qwen2",
            "--template", "qwen", "--dataset", str(alpaca), str(sharegpt), "--tuner_type", "lora",
            "--num_train_epochs", "1", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
            "--max_length", "128", "--output_dir", str(out), "--add_version", "false", "--check_model", "false",
            "--report_to", "none", "--dataloader_num_workers", "0", "--use_cpu", "true", "--save_strategy", "no",
            "--logging_steps", "5", "--split_dataset_ratio", "0", "--dataset_num_proc", "1"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=scaled(600),
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "logging.jsonl").read_text().splitlines()]
    steps = [r["global_step/max_steps"] for r in records if "global_step/max_steps" in r]
    assert steps[-1] == "20/20", steps
