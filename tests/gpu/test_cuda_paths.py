"""The GPU paths, for real: NVML sampling of a process that holds CUDA memory, CUDA peak-memory events,
bf16 and QLoRA on CUDA, the CUDA fp16 GradScaler (an overflow skips the step) and FSDP over NCCL.

They need an NVIDIA GPU (FSDP two of them) and skip with the reason on any other machine; the CPU
versions of the same paths are tested in tests/runs. Each run is the tiny model for a few steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.core.process_identity import RUN_MARKER_ENV
from backend.hardware.machine import query_hardware
from backend.hardware.monitor import SystemMonitor
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from tests.runs.helpers import log_events, quick_profile, workbench
from tests.timing import scaled

GIB = 2**30
HARDWARE = query_hardware()
NO_GPU = f"needs an NVIDIA GPU; this machine has none ({HARDWARE.nvml_error or 'NVML lists no GPU'})"

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HARDWARE.gpus, reason=NO_GPU)]
needs_two = pytest.mark.skipif(len(HARDWARE.gpus) < 2, reason=NO_GPU if not HARDWARE.gpus else
                               f"FSDP over NCCL needs two NVIDIA GPUs; this machine has {len(HARDWARE.gpus)}")
needs_bf16 = pytest.mark.skipif(not HARDWARE.bf16_ready, reason=NO_GPU if not HARDWARE.gpus else
                                "bf16 needs every GPU to be Ampere or newer: " + HARDWARE.describe())

CUDA = {"device": "cuda", "gpu_ids": [0]}
# holds 1 GiB of CUDA memory until its stdin closes, as a run's trainer would
HOLDER = ("import sys, torch; x = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); "
          "torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.read()")


def _finished_run(profile: Path) -> object:
    workbench("run", str(profile), timeout=900)
    run = find_run("quickstart-test")
    assert refresh(run).status == "finished", run.log_tail()[-2000:]
    return run


def _run_begin(run: object) -> dict:
    return next(e for e in read_all(run.events_path) if e["type"] == "run_begin")  # type: ignore[attr-defined]


def test_nvml_samples_the_gpu_memory_of_the_runs_processes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, RUN_MARKER_ENV: str(run_dir.resolve()), "CUDA_VISIBLE_DEVICES": "0"}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        monitor = SystemMonitor(run_dir)
        deadline = time.monotonic() + 30
        sample = monitor.sample()
        while not sample.gpus[0].run_process_count and time.monotonic() < deadline:
            time.sleep(0.5)
            sample = monitor.sample()
        gpu = sample.gpus[0]
        assert sample.gpu_error is None and gpu.memory_total == HARDWARE.gpus[0].memory_total_bytes
        assert gpu.run_process_count == 1 and gpu.run_memory is not None and gpu.run_memory >= 1 * GIB
        assert gpu.memory_used is not None and gpu.memory_used >= gpu.run_memory
        assert gpu.utilization is None or 0 <= gpu.utilization <= 100
    finally:
        holder.communicate(timeout=scaled(30))


@pytest.mark.slow
def test_cuda_run_logs_allocator_peaks(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = _finished_run(quick_profile(tmp_path, distribution=CUDA, training={"max_steps": 10, "logging_steps": 1}))
    assert _run_begin(run)["devices"] == ["cuda:0"]
    for event in log_events(run):
        (cuda,) = event["cuda"]
        assert cuda["device"] == 0 and 0 < cuda["allocated"] <= cuda["max_allocated"] <= cuda["max_reserved"]
    (end,) = [e for e in read_all(run.events_path) if e["type"] == "run_end"]
    assert end["cuda_peaks"] and end["cuda_peaks"][0]["max_reserved"] > 0


@pytest.mark.slow
@needs_bf16
def test_bf16_on_cuda_has_no_scaler(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = _finished_run(quick_profile(tmp_path, distribution=CUDA, precision={"bf16": True, "fp16": False},
                                      training={"max_steps": 10, "logging_steps": 1}))
    begin = _run_begin(run)
    assert (begin["precision"], begin["mixed_precision"], begin["scaler"]) == ("bf16", "bf16", None)
    assert all(e["loss"] is not None and e["loss_scale"] is None for e in log_events(run))


@pytest.mark.slow
def test_qlora_on_cuda_trains_4bit_layers(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = _finished_run(quick_profile(tmp_path, distribution=CUDA,
                                      tuner={"type": "qlora", "quant_bits": 4, "quant_method": "bnb",
                                             "bnb_4bit_compute_dtype": "float32"},
                                      training={"max_steps": 10, "logging_steps": 1}))
    assert "Linear4bit" in run.log_path.read_text()  # type: ignore[attr-defined]
    begin = _run_begin(run)
    assert 0 < begin["trainable_params"] < begin["total_params"]
    assert all(e["loss"] is not None for e in log_events(run))


@pytest.mark.slow
def test_cuda_fp16_grad_scaler_skips_the_overflow_step(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    run = _finished_run(quick_profile(
        tmp_path, distribution=CUDA,
        precision={"fp16": True, "bf16": False, "loss_scale_init": 64.0, "loss_scale_growth_interval": 4},
        training={"max_steps": 12, "logging_steps": 1, "save_steps": 1, "save_total_limit": 12},
        debug={"inject_overflow_steps": [10]}))
    begin = _run_begin(run)
    assert (begin["precision"], begin["scaler"]) == ("fp16", "GradScaler") and begin["devices"] == ["cuda:0"]
    by_step = {e["step"]: e for e in log_events(run)}
    assert by_step[10]["loss_scale"] == by_step[9]["loss_scale"] / 2 and by_step[10]["skipped_steps"] == 1
    adapter = lambda step: load_file(run.path / "output" / f"checkpoint-{step}" / "adapter_model.safetensors")  # type: ignore[attr-defined]  # noqa: E731
    before, at_overflow, after = adapter(9), adapter(10), adapter(11)
    assert all(torch.equal(before[k], at_overflow[k]) for k in before)
    assert any(not torch.equal(at_overflow[k], after[k]) for k in after)


@pytest.mark.slow
@needs_two
def test_fsdp_over_nccl_two_ranks_agree(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    run = _finished_run(quick_profile(
        tmp_path, distribution={"strategy": "fsdp", "device": "cuda", "nproc_per_node": 2, "gpu_ids": [0, 1]},
        training={"max_steps": 10, "logging_steps": 1}))
    begins = [e for e in read_all(run.events_path) if e["type"] == "run_begin"]  # type: ignore[attr-defined]
    assert sorted(e["rank"] for e in begins) == [0, 1]
    assert all(e["distributed_type"] == "FSDP" and e["world_size"] == 2 for e in begins)
    assert sorted(e["devices"][0] for e in begins) == ["cuda:0", "cuda:1"]
    rank0 = {e["step"]: e["loss"] for e in log_events(run, rank=0)}
    rank1 = {e["step"]: e["loss"] for e in log_events(run, rank=1)}
    assert rank0 and rank0.keys() == rank1.keys()
