"""bench/gpu_check.py without a GPU: the dry run builds and validates every case's exact launch, the CPU
smoke run goes through the whole path once, and the report reads GPU-shaped run folders."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file

from backend.contract.event_writer import EventWriter
from backend.core.paths import REPO_DIR
from backend.profile import load_profile
from backend.rundir.layout import RunFolder, RunState
from tests.timing import scaled

SCRIPT = REPO_DIR / "bench" / "gpu_check.py"
GIB = 2**30


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=scaled(timeout),
                          cwd=REPO_DIR)


def test_dry_run_builds_every_case(tmp_path: Path) -> None:
    result = _run("--dry-run", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dry run: 5 case(s), 0 with validation errors" in result.stdout
    sections = result.stdout.split("\ndry run:")[0].split("## ")[1:]
    assert [s.split(":")[0] for s in sections] == ["lora-bf16", "qlora-4bit", "full-bf16", "fp16-loss-scale",
                                                   "fsdp-1proc"]
    for section in sections:
        predicted = float(section.split("predicted peak per GPU: ")[1].split(" GiB")[0])
        assert 1 < predicted < 80  # the planner forecast the real shapes
        command = section.strip().splitlines()[-1]
        assert "CUDA_VISIBLE_DEVICES=0" in command and "--use_cpu" not in command
        assert "--truncation_strategy=right" in command and "--save_strategy=no" in command
    assert "--quant_bits 4" in sections[1] and "--tuner_type full" in sections[2]
    assert "WORKBENCH_LOSS_SCALE_INIT=65536.0" in sections[3] and "WORKBENCH_INJECT_OVERFLOW_STEPS=10" in sections[3]
    fsdp = load_config_from_file(str(tmp_path / "runs" / "fsdp-1proc" / "accelerate_config.yaml"))
    assert fsdp.distributed_type.value == "FSDP" and fsdp.num_processes == 1
    assert fsdp.fsdp_config["fsdp_version"] == 2 and fsdp.fsdp_config["fsdp_activation_checkpointing"] is True
    assert fsdp.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "Qwen2DecoderLayer"
    assert load_profile(tmp_path / "profiles" / "qlora-4bit.toml").tuner.type == "qlora"


def test_unknown_case_is_named(tmp_path: Path) -> None:
    result = _run("--dry-run", "--only", "lora-bf16,nope", "--work-dir", str(tmp_path))
    assert result.returncode != 0 and "unknown case(s) ['nope']" in result.stderr


def test_report_from_gpu_shaped_run_folders(tmp_path: Path) -> None:
    """The table reads what a GPU run leaves: forecast.json and events with CUDA peaks and loss scales."""
    bench = _bench()
    run = RunFolder(tmp_path / "run")
    run.path.mkdir()
    run.write_state(RunState(run_id="run", profile_name="gpu-check-fp16-loss-scale", status="finished"))
    run.forecast_path.write_text(json.dumps({"per_device_total_bytes": 11 * GIB}))
    writer = EventWriter(run.events_path)
    for step, scale, overflows in ((5, 65536.0, 0), (10, 32768.0, 1), (15, 32768.0, 1)):
        writer.write("log", step=step, max_steps=15, loss=3.0 - step / 10, loss_scale=scale, overflow_count=overflows,
                     steps_per_second=2.0 + step / 100, tokens_per_second=8000.0,
                     cuda=[{"device": 0, "allocated": GIB, "reserved": 2 * GIB, "max_reserved": 10 * GIB,
                            "max_allocated": 9 * GIB}])
    case = next(c for c in bench.CASES if c.name == "fp16-loss-scale")
    row = bench.collect(run, case, case.model)
    assert (row.predicted_bytes, row.measured_reserved_bytes, row.overflow_count) == (11 * GIB, 10 * GIB, 1)
    assert row.steps_per_second == pytest.approx(2.125)  # median, the first log (warm-up) left out
    assert round(row.error_percent) == 10
    text = bench.render_report([row], "NVIDIA H100 80GB HBM3 (79.6 GiB)", "2026-01-02", bench.Settings(), [])
    assert text.startswith("# GPU check, 2026-01-02, NVIDIA H100 80GB HBM3 (79.6 GiB)")
    assert ("| fp16-loss-scale | qwen2-0.5b | LoRA, fp32 weights, fp16 autocast + dynamic loss scale | finished "
            "| 11.00 | 10.00 | 9.00 | +10% | 2.12 | 8000 | 2.500 -> 1.500 | 65536 -> 32768 (1 overflow) |") in text
    assert bench.report_path(tmp_path, "2026-01-02", "NVIDIA H100 80GB HBM3").name == \
        "gpu-check-2026-01-02-nvidia-h100-80gb-hbm3.md"


@pytest.mark.slow
def test_cpu_smoke_goes_through_the_whole_path(tmp_path: Path, tiny_model: Path) -> None:
    result = _run("--cpu-smoke", "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "results"),
                  timeout=scaled(300))
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = (tmp_path / "results").glob("gpu-check-*-cpu-smoke-test-no-gpu.md")
    row = next(line for line in report.read_text().splitlines() if line.startswith("| cpu-smoke-lora"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "finished" and float(cells[4]) > 0  # a forecast was stored at launch
    assert float(cells[8]) > 0 and "->" in cells[10]  # steps/s and the loss were read from the events
