"""The flight recorder's GPU path (#39): two NCCL ranks, rank 1 skips an all-reduce, rank 0's NCCL watchdog
times out and torch dumps every rank's recorder into the run folder (the launch's variables); torch's own
analyser (`torch_analysis`) then reads the dumps. Needs two NVIDIA GPUs; skips with the reason elsewhere (the CPU
suite covers the gloo path: dumps asked at a hang alert, tests/hang/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.contract.flight_recorder import flight_recorder_dir, flight_recorder_env
from backend.hang.flight_recorder import torch_analysis
from backend.hardware.machine import query_hardware
from backend.launch.nodes import free_port

HARDWARE = query_hardware()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    len(HARDWARE.gpus) < 2, reason="an NCCL timeout between two ranks needs two NVIDIA GPUs; this machine has "
                                   f"{len(HARDWARE.gpus)} ({HARDWARE.nvml_error or 'NVML'})")]

SCRIPT = """
import datetime, os, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=15))
x = torch.ones(4, device="cuda")
for i in range(3):
    if rank == 1 and i == 2:
        time.sleep(60)  # rank 1 never issues collective 3 in time
        break
    dist.all_reduce(x)
torch.cuda.synchronize()
"""


def test_an_nccl_timeout_dumps_into_the_run_and_torch_analyses_it(tmp_path: Path) -> None:
    flight_recorder_dir(tmp_path).mkdir(parents=True)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env={
        **os.environ, **flight_recorder_env(tmp_path), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for rank in (0, 1)]
    logs = [p.communicate(timeout=180)[0].decode(errors="replace") for p in procs]
    dumps = sorted(p.name for p in flight_recorder_dir(tmp_path).iterdir())
    assert dumps, logs
    analysis = torch_analysis(tmp_path)
    assert analysis is not None and "failed" not in analysis.splitlines()[0], analysis
