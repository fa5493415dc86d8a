"""Creep told apart from length (#37 item 6): memory per step against the batch's token count.

Every rank's `step_time` event lists, per optimizer step, its largest micro-batch (rows x padded length) and
the memory after its largest forward (backend/plugin/step_timing.py: host RSS on a CPU run, the CUDA
allocator's bytes on a GPU). Two causes of a late out-of-memory look alike from outside:
- a long batch: memory follows the batch's tokens; a peak at the longest batch is the batch;
- creep (a leak, fragmentation, a growing cache): memory grows at EQUAL length.

So the rate is measured only between steps of the same token count: the least-squares slope of memory on
step within each group of equal length, pooled (a long batch is a group of its own and moves no slope).
Creep is said when that rate holds over enough equal-length steps, in both halves of them (a one-time jump,
such as the allocator keeping a long batch's memory, is not a rate), and its growth over them passes a
floor; the step where it would reach the limit (the GPU's or the machine's memory) follows from the rate.
Pure: the watchdog's detector and the monitor feed it the events; tests feed it numbers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from backend.contract.events import StepTime
from backend.core.units import MIB, size

WARMUP_STEPS = 5  # the first steps allocate the optimizer's states and the allocator's pools: not creep
MIN_EQUAL_STEPS = 20  # equal-length steps (after the warm-up) before a rate is said
MIN_GROWTH_BYTES = 64 * MIB  # growth at equal length over the steps seen, below which nothing is said
HALF_AGREEMENT = 0.5  # each half's rate must be at least this share of the whole rate


@dataclass(frozen=True)
class StepMemory:
    step: int
    tokens: int  # the step's largest micro-batch, padded
    memory: int  # bytes after its largest forward


@dataclass(frozen=True)
class Creep:
    bytes_per_step: float
    equal_steps: int  # the equal-length steps it was measured over
    growth_bytes: float  # the rate times the steps they span
    last_step: int
    oom_step: int | None  # where the largest memory seen would reach the limit at this rate
    kind: str | None = None

    def line(self) -> str:
        rate = f"+{size(self.bytes_per_step * 1000)} per 1,000 steps at equal length"
        if self.oom_step is None:
            return f"{rate}: memory creeps ({_what(self.kind)})"
        return f"{rate}: OOM expected near step {self.oom_step:,} ({_what(self.kind)})"


@dataclass(frozen=True)
class Peak:
    point: StepMemory
    longest_batch: bool  # the peak came with the longest batch seen, longer than the usual one

    def line(self) -> str:
        said = f"peak {size(self.point.memory)} at step {self.point.step:,}"
        if self.longest_batch:
            return f"{said}: the longest batch ({self.point.tokens:,} tokens), not creep"
        return f"{said} ({self.point.tokens:,} tokens)"


def _what(kind: str | None) -> str:
    return {"host_rss": "host RSS", "host_peak_rss": "host RSS", "cuda_allocated": "GPU allocated"}.get(
        kind or "", kind or "memory"
    )


def step_points(event: StepTime) -> list[StepMemory]:
    """The steps an event lists (each step's tokens and memory; empty for an event of before #37)."""
    return [StepMemory(*step) for step in event.memory_steps()]


def pooled_rate(points: list[StepMemory]) -> tuple[float, int] | None:
    """(bytes per step within equal-length groups, steps counted), or None with no group of two steps."""
    groups: dict[int, list[StepMemory]] = defaultdict(list)
    for point in points:
        groups[point.tokens].append(point)
    covariance = variance = 0.0
    counted = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        mean_step = sum(p.step for p in members) / len(members)
        mean_memory = sum(p.memory for p in members) / len(members)
        covariance += sum((p.step - mean_step) * (p.memory - mean_memory) for p in members)
        variance += sum((p.step - mean_step) ** 2 for p in members)
        counted += len(members)
    return (covariance / variance, counted) if variance else None


def creep(
    points: list[StepMemory],
    limit: int | None = None,
    kind: str | None = None,
    *,
    min_growth: float = MIN_GROWTH_BYTES,
    min_steps: int = MIN_EQUAL_STEPS,
) -> Creep | None:
    """Creep at equal length, or None when memory does not grow at equal length (or not enough is seen)."""
    steady = sorted((p for p in points if p.step > WARMUP_STEPS), key=lambda p: p.step)
    whole = pooled_rate(steady)
    if whole is None or whole[1] < min_steps or whole[0] <= 0:
        return None
    rate, counted = whole
    middle = len(steady) // 2
    for half in (steady[:middle], steady[middle:]):
        part = pooled_rate(half)
        if part is None or part[0] < HALF_AGREEMENT * rate:
            return None
    growth = rate * (steady[-1].step - steady[0].step)
    if growth < min_growth:
        return None
    last = steady[-1].step
    oom = None
    if limit:
        highest = max(p.memory for p in points)
        oom = last + max(0, round((limit - highest) / rate))
    return Creep(rate, counted, growth, last, oom, kind)


def peak(points: list[StepMemory]) -> Peak | None:
    """The step of the largest memory, and whether it came with the longest batch."""
    if not points:
        return None
    top = max(points, key=lambda p: (p.memory, -p.step))
    tokens = sorted(p.tokens for p in points)
    usual = tokens[len(tokens) // 2]
    return Peak(top, longest_batch=top.tokens == tokens[-1] and top.tokens > usual)
