"""Creep told apart from length (#37 item 6), on hand-written steps: the watchdog's detector and the reading the
monitor shows. Real runs: tests/watch/test_memory_creep_runs.py."""

from __future__ import annotations

from backend.contract.events import StepTime
from backend.core.units import GIB, MIB
from backend.estimate.creep import StepMemory, peak
from backend.watch.memory_detectors import MemoryCreepDetector


def _event(first: int, tokens: list[int], memory: list[int], limit: int = 16 * GIB) -> StepTime:
    return StepTime(
        first_step=first,
        last_step=first + len(tokens) - 1,
        step_tokens=tokens,
        step_memory=memory,
        memory_kind="host_rss",
        memory_limit=limit,
    )


def _feed(tokens: list[int], memory: list[int]) -> list:
    detector = MemoryCreepDetector(min_mib=64, min_steps=20)
    found = []
    for start in range(0, len(tokens), 10):  # one event per 10 logged steps
        found += detector.on_event(_event(start + 1, tokens[start : start + 10], memory[start : start + 10]))
    return found


def test_a_leak_at_equal_length_is_creep_with_its_rate_and_the_oom_step() -> None:
    # 512 MiB + 8 MiB a step, every batch 100 tokens: 8,000 MiB per 1,000 steps (7.8 GiB); the highest is 832 MiB at
    # step 40, and 16 GiB = 16,384 MiB is reached (16,384 - 832) / 8 = 1,944 steps later: step 1,984
    found = _feed([100] * 40, [(512 + 8 * step) * MIB for step in range(1, 41)])
    assert len(found) == 1
    assert found[0].kind == "memory_creep"
    assert found[0].message == "+7.8 GiB per 1,000 steps at equal length: OOM expected near step 1,984 (host RSS)"
    assert found[0].evidence["bytes_per_1000_steps"] == 8000 * MIB


def test_flat_memory_at_equal_length_is_no_creep() -> None:
    noise = [0, 3, -2, 1, -3, 2, 0, -1, 3, -2]
    assert _feed([100] * 40, [(600 + noise[step % 10]) * MIB for step in range(40)]) == []


def test_a_long_batch_is_the_batch_not_creep() -> None:
    tokens = [100] * 40
    memory = [600 * MIB] * 40
    tokens[19], memory[19] = 1000, 900 * MIB  # step 20: the longest batch, 300 MiB more
    assert _feed(tokens, memory) == []
    found = peak([StepMemory(step, t, m) for step, (t, m) in enumerate(zip(tokens, memory, strict=True), 1)])
    assert found is not None
    assert found.line() == "peak 900.0 MiB at step 20: the longest batch (1,000 tokens), not creep"


def test_one_jump_that_stays_is_not_a_rate() -> None:
    # at step 30 the memory rises 100 MiB once and stays (the allocator kept a block): no growth in either half
    memory = [(600 if step < 30 else 700) * MIB for step in range(1, 41)]
    assert _feed([100] * 40, memory) == []
