"""The longest batch and memory creep on real CPU runs of the built-in model (#37 items 5 and 6): the step swift's
sampler puts a long row at (predicted, then measured), a leak injected at every step (the creep alert with its
rate), and an equal-length run (no creep alert). Expected values are written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.contract.alerts import read_alerts
from backend.contract.events import read_all
from backend.estimate.creep import WARMUP_STEPS, StepMemory, pooled_rate
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from tests.runs.helpers import quick_profile, wait_for, workbench

pytestmark = pytest.mark.slow
SPLIT_ACROSS_WORKERS = True  # each test its own real run

SHORT = {"messages": [{"role": "user", "content": "who are you?"}, {"role": "assistant", "content": "I am Quill."}]}
LONG_REPLY = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)  # several hundred tokens


def _dataset(path: Path, rows: int, long_at: int | None = None) -> Path:
    lines = [dict(SHORT) for _ in range(rows)]
    if long_at is not None:
        lines[long_at] = {"messages": [SHORT["messages"][0], {"role": "assistant", "content": LONG_REPLY}]}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _profile(tmp_path: Path, data: Path, training: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    return quick_profile(
        tmp_path,
        data={"train": [str(data)]},
        training={"logging_steps": 5, "save_steps": 1000, "per_device_train_batch_size": 1, **training},
        watch={"poll_seconds": 0.5, "actions": {"throughput": "off"}},
        extra_swift_args=extra or {},
    )


def _run_to_the_end(profile: Path) -> RunFolder:
    result = workbench("run", str(profile), "--detach")
    run = find_run(result.stdout.strip().splitlines()[-1])
    wait_for(lambda: _watchdog_done(run), timeout=300, what="the run's end and the watchdog's last poll")
    return run


def _watchdog_done(run: RunFolder) -> bool:
    try:
        return json.loads((run.path / "watch" / "status.json").read_text())["alive"] is False
    except (OSError, ValueError):
        return False


def _steps(run: RunFolder) -> dict[int, tuple[int, int]]:
    """step -> (its largest micro-batch's tokens, memory after its forward), from rank 0's step_time events."""
    found: dict[int, tuple[int, int]] = {}
    for event in read_all(run.events_path):
        if event["type"] == "step_time" and event["rank"] == 0 and event["first_step"] is not None:
            for i, pair in enumerate(zip(event.get("step_tokens", []), event.get("step_memory", []), strict=False)):
                found[event["first_step"] + i] = pair
    return found


def test_the_longest_batch_lands_at_the_step_the_seed_puts_it(
    tiny_model: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    # 24 rows, the long one at index 13 (0-based); swift's load_dataset keeps file order (dataset_shuffle false);
    # swift's BatchSamplerShard draws torch.randperm(24) from a generator seeded with data_seed (swift's default
    # 42) at epoch 0: [6, 15, 22, 2, 10, 19, 3, 18, 14, 17, 4, 13, 8, ...]: index 13 comes 12th (position 11).
    # Micro-batches of 1 row, accumulation 2: micro-batch 11 (0-based) belongs to optimizer step 11 // 2 + 1 = 6,
    # of 24 / 2 = 12 steps in one epoch.
    data = _dataset(tmp_path / "long-row.jsonl", 24, long_at=13)
    profile = _profile(
        tmp_path,
        data,
        {"num_train_epochs": 1.0, "gradient_accumulation_steps": 2, "max_length": 1024},
        {"dataset_shuffle": False},
    )
    said = workbench("estimate", str(profile), timeout=600).stdout
    line = next(text for text in said.splitlines() if text.startswith("longest batch"))
    assert line.startswith("longest batch at step 6 of 12: "), said
    run = _run_to_the_end(profile)
    steps = _steps(run)
    assert sorted(steps) == list(range(1, 13))
    tokens = {step: pair[0] for step, pair in steps.items()}
    assert max(tokens, key=lambda step: tokens[step]) == 6
    assert line.startswith(f"longest batch at step 6 of 12: {tokens[6]:,} tokens")  # swift's length, measured
    memory = {step: pair[1] for step, pair in steps.items()}
    print(f"peak RSS per step (MiB): {[round(memory[step] / 2**20, 1) for step in sorted(memory)]}")  # pytest -rP
    # the measured peak lands there: step 6 raises the peak RSS most (about 20 MiB, the others under 1 MiB), and no
    # later step passes it by a tenth of that (the allocator keeps part of the long batch's pages: the steps after
    # it start from there)
    rises = {step: memory[step] - memory[step - 1] for step in range(2, 13)}
    assert max(rises, key=lambda step: rises[step]) == 6, memory
    assert max(memory.values()) - memory[6] < rises[6] / 10, memory


def test_a_leak_at_every_step_is_alerted_as_creep_with_its_rate(
    tiny_model: Path, isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_INJECT_LEAK_MIB", "16")  # 16 MiB more held at every step: 16,000 MiB a 1,000
    data = _dataset(tmp_path / "equal.jsonl", 48)  # every row the same: every batch of equal length
    run = _run_to_the_end(_profile(tmp_path, data, {"max_steps": 40}))
    creep = [a for a in read_alerts(run.path) if a.kind == "memory_creep"]
    assert len(creep) == 1, [a.kind for a in read_alerts(run.path)]
    rate = creep[0].evidence["bytes_per_1000_steps"] / 2**20
    print(f"measured creep: {creep[0].message}")  # pytest -rP shows it
    assert 14_000 <= rate <= 18_000, creep[0].evidence  # 16,000 MiB per 1,000 steps, within the RSS's noise
    assert (
        creep[0].message.startswith("+")
        and " per 1,000 steps at equal length: OOM expected near step " in creep[0].message
        and creep[0].message.endswith(" (host RSS)")
    )


def test_an_equal_length_run_without_a_leak_raises_no_creep_alert(
    tiny_model: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    data = _dataset(tmp_path / "equal.jsonl", 48)
    run = _run_to_the_end(_profile(tmp_path, data, {"max_steps": 40}))
    steps = _steps(run)
    assert sorted(steps) == list(range(1, 41))  # every step's memory was measured: the detector had it all
    assert len({pair[0] for pair in steps.values()}) == 1  # and every batch had the same length
    assert [a.kind for a in read_alerts(run.path) if a.kind == "memory_creep"] == []
    points = [StepMemory(step, *pair) for step, pair in steps.items() if step > WARMUP_STEPS]
    print(f"equal-length rate without a leak: {pooled_rate(points)[0] * 1000 / 2**20:+.1f} MiB per 1,000 steps")
