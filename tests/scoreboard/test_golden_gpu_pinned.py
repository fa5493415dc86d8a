"""Golden prompts beside a GPU training (#34 item 11): the GPU an inference copy fits on is chosen by nvitop's own
`select_devices` (asked for the forecast's inference copy), judged again at every start (a first "no room" does
not hold for the rest of the run), and the job is pinned to that GPU (CUDA_VISIBLE_DEVICES), not left to swift's
default device map (cuda:0, the training's). NVML's answers come from a stand-in nvitop (tests/nvitop_fake.py)
whose `select_devices` answers what the test says; nothing is trained or loaded. Two unanswered checkpoints at one
tick are answered by one job: tests/scoreboard/test_golden_several_missing.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.golden.answers import PROMPTS_COPY, golden_dir
from backend.golden.job import GoldenKeeper
from backend.jobs.job import list_jobs, stop_job
from backend.profile import LaunchProfile, save_profile
from backend.rundir import index
from tests.fakes import gpu_box
from tests.nvitop_fake import fake_nvitop
from tests.scoreboard.golden_helpers import ANSWERS, PROMPTS, write_answers
from tests.scoreboard.scoreboard_helpers import fake_run, log, saved

GIB = 1024**3
NEED = int(2.5 * GIB)  # the forecast's inference copy: 2 GiB of weights and a 0.5 GiB CUDA context


def test_the_golden_job_runs_on_the_gpu_nvitop_selects_judged_at_each_start(
        isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(isolated_runs, [log(2, 1.0), saved(2)], {2: True})
    save_profile(LaunchProfile.model_validate({"name": "fake", "distribution": {"device": "cuda"}}), run.profile_path)
    run.forecast_path.write_text(json.dumps({"timeline": [
        {"phase": "eval", "gpu_terms": {"weights": 2 * GIB, "cuda_context": GIB // 2}}]}))
    write_answers(run, "base", ANSWERS["base"])
    (golden_dir(run) / PROMPTS_COPY).write_text("".join(
        json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n" for prompt, _ in PROMPTS))
    index.register(run.path)

    asked: list[dict[str, Any]] = []
    answer: list[int] = []
    nvitop = fake_nvitop()
    nvitop.select_devices = lambda devices, **criteria: (asked.append(criteria), list(answer))[1]  # type: ignore
    monkeypatch.setitem(sys.modules, "nvitop", nvitop)
    monkeypatch.setattr("backend.hardware.machine.detect_hardware", lambda: gpu_box(count=2))
    said: list[str] = []
    keeper = GoldenKeeper(run, said.append)  # its thread is not started: the test makes its ticks

    assert keeper._tick(training=True) is None  # nvitop: no GPU has 2.5 GiB free now
    assert said == ["golden prompts: an inference copy needs about 2.5 GiB, 79.0 GiB free on the emptiest GPU "
                    "(NVML): answering after training"]
    assert asked == [{"format": "index", "force_index": True, "max_count": 1, "min_free_memory": NEED}]

    answer.append(1)  # memory freed meanwhile: GPU 1 has room
    job = keeper._tick(training=True)
    try:
        assert job is not None
        spec = job.read_spec()
        assert (spec.env["CUDA_VISIBLE_DEVICES"], spec.env["CUDA_DEVICE_ORDER"]) == ("1", "PCI_BUS_ID")
        assert spec.description == "golden prompts answered by checkpoint-2"
        assert "on GPU 1 (CUDA_VISIBLE_DEVICES)" in spec.notes
        assert said[1:] == ["golden prompts: an inference copy needs about 2.5 GiB, 79.0 GiB free on GPU 1 (NVML): "
                            "answering on GPU 1 while training goes on",
                            f"golden prompts: job {job.job_id} started (golden prompts answered by checkpoint-2)"]
    finally:
        for started in list_jobs(run.jobs_dir, kind="golden"):
            stop_job(started)
