"""System sampling on this machine: host RAM, a real process tree marked as a run, NVML or why not."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.core.process_identity import RUN_MARKER_ENV
from backend.hardware.machine import query_hardware
from backend.hardware.monitor import SystemMonitor, SystemSample
from backend.watch.probes import GpuReader
from tests.nvitop_fake import READINGS, fake_nvitop
from tests.timing import scaled

# a parent that starts a child and both hold some memory, like a launcher and its worker
CHILD = "import time; b = b'x' * (40 << 20); print('ready', flush=True); time.sleep(60)"
TREE = (
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE, text=True)\n"
    "child.stdout.readline()\n"
    "a = b'y' * (20 << 20)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def fake_run(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A process tree carrying a run folder's marker, as every process of a real run does."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, RUN_MARKER_ENV: str(run_dir.resolve())}
    parent = subprocess.Popen([sys.executable, "-c", TREE], env=env, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
    yield run_dir, parent
    for proc in [*psutil.Process(parent.pid).children(recursive=True), psutil.Process(parent.pid)]:
        proc.kill()
    parent.wait()


def test_host_memory_is_this_machines() -> None:
    sample = SystemMonitor().sample()
    memory = psutil.virtual_memory()
    assert sample.host_total == memory.total
    assert 0 < sample.host_used < sample.host_total
    assert sample.run_rss is None and sample.run_pids == ()  # no run given


def test_run_tree_rss_sums_every_process_of_the_run(fake_run: tuple[Path, subprocess.Popen[str]]) -> None:
    run_dir, parent = fake_run
    sample = SystemMonitor(run_dir).sample()
    tree = [psutil.Process(parent.pid), *psutil.Process(parent.pid).children(recursive=True)]
    assert set(sample.run_pids) == {p.pid for p in tree}
    expected = sum(p.memory_info().rss for p in tree)
    assert sample.run_rss == pytest.approx(expected, rel=0.05)
    assert sample.run_rss > 60 << 20  # the two bytearrays


HARDWARE = query_hardware()


@pytest.mark.gpu
@pytest.mark.skipif(not HARDWARE.gpus, reason=f"needs an NVIDIA GPU; this machine has none ({HARDWARE.nvml_error}); "
                                              "test_no_gpu_is_said covers it")
def test_every_gpu_is_sampled() -> None:
    sample = SystemMonitor().sample()
    assert sample.gpu_error is None
    assert [g.index for g in sample.gpus] == [g.index for g in HARDWARE.gpus]
    assert all(g.memory_total == h.memory_total_bytes for g, h in zip(sample.gpus, HARDWARE.gpus, strict=True))


@pytest.mark.skipif(bool(HARDWARE.gpus), reason="this machine has an NVIDIA GPU: test_every_gpu_is_sampled covers it")
def test_no_gpu_is_said() -> None:
    sample = SystemMonitor().sample()
    assert sample.gpus == ()
    assert "no NVIDIA GPU" in (sample.gpu_error or "")


def test_nvml_is_asked_once_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_FAKE_NO_GPU", "1")
    monitor = SystemMonitor()
    first, second = monitor.sample(), monitor.sample()
    assert first.gpu_error == second.gpu_error and "no NVIDIA GPU" in first.gpu_error


def test_run_loop_reports_until_stopped_and_survives_a_failed_callback() -> None:
    samples: list[SystemSample] = []
    errors: list[Exception] = []

    def on_sample(sample: SystemSample) -> None:
        samples.append(sample)
        if len(samples) == 1:
            raise RuntimeError("a consumer failed once")

    stop = threading.Event()
    monitor = SystemMonitor(interval=0.02)
    thread = threading.Thread(target=monitor.run, args=(on_sample, stop, errors.append))
    thread.start()
    deadline = time.monotonic() + 10
    while len(samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=scaled(5))
    assert not thread.is_alive()
    assert len(samples) >= 3 and [str(e) for e in errors] == ["a consumer failed once"]
    assert samples[-1].time >= samples[0].time


# ------------------------------------------------------------ recorded nvitop readings (any machine)

GIB = 2**30


@pytest.fixture
def no_fake_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_FAKE_NO_GPU", raising=False)


def test_the_runs_gpu_memory_comes_from_nvitops_process_list(
        fake_run: tuple[Path, subprocess.Popen[str]], no_fake_switch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, parent = fake_run
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(self_pid=parent.pid))
    a100, t4, lost = SystemMonitor(run_dir).sample().gpus
    assert (a100.name, a100.memory_used, a100.memory_total, a100.utilization) == (
        "NVIDIA A100-SXM4-80GB", 12465471488, 85899345920, 37)
    assert (a100.run_memory, a100.run_process_count) == (11811160064, 1)  # not the other process's N/A
    assert (t4.utilization, t4.run_memory, t4.run_process_count) == (None, 0, 0)
    assert (lost.name, lost.memory_total, lost.run_memory) == ("GPU 2 (not answering)", None, 0)


def test_a_run_process_whose_memory_is_na_makes_the_runs_gpu_memory_unknown(
        fake_run: tuple[Path, subprocess.Popen[str]], no_fake_switch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, parent = fake_run
    machine = copy.deepcopy(READINGS)
    machine["devices"][0]["processes"][0]["gpu_memory"] = "N/A"  # as in some containers
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(machine, self_pid=parent.pid))
    a100 = SystemMonitor(run_dir).sample().gpus[0]
    assert (a100.run_memory, a100.run_process_count) == (None, 1)


def test_on_a_mig_gpu_the_runs_memory_is_read_from_its_slice(
        fake_run: tuple[Path, subprocess.Popen[str]], no_fake_switch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, parent = fake_run
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(READINGS["mig_machine"], self_pid=parent.pid))
    (h100,) = SystemMonitor(run_dir).sample().gpus
    assert (h100.run_memory, h100.run_process_count, h100.utilization) == (10 * GIB, 1, None)


def test_the_watchdogs_gpu_reader_uses_the_same_adapter(no_fake_switch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop())
    assert GpuReader().read() == [(0, 12465471488, 85899345920), (1, 268435456, 16106127360), (2, None, None)]
    monkeypatch.setitem(sys.modules, "nvitop", fake_nvitop(init_error=OSError("NVML Shared Library Not Found")))
    assert GpuReader().read() == []


def test_no_nvml_is_one_line_of_ours_and_nothing_on_stderr() -> None:
    """nvitop logs a coloured banner when NVML is missing; over a TUI that would be garbage on the screen."""
    code = "from backend.hardware.machine import query_hardware; print(query_hardware().describe())"
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_FAKE_NO_GPU"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=scaled(60),
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("no NVIDIA GPU (NVML unavailable: ") or "GPU(s) [" in done.stdout
