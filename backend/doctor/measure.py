"""What the trainer measured of a run's steps (its `step_time` events, every rank), summed per rank."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from backend.contract.events import EVENTS_FILE_NAME, EventReader, MemoryPhase, RunBegin, StepTime

INSIDE = ("data_wait", "forward_backward", "optimizer", "other_in_step")
BETWEEN = ("logging", "eval", "save", "between_other")
PARTS = INSIDE + BETWEEN
WARMUP_STEPS = 3  # the first steps (allocation, optimizer state, lazy kernels) are not the steady pace


@dataclass
class RankSteps:
    """One rank's sums over the run so far."""

    rank: int
    step_seconds: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    forward: float = 0.0  # of forward_backward: before the gradient exchange
    forward_wait: float = 0.0  # of forward: waiting for the other ranks (DDP's buffer broadcast)
    real_tokens: int = 0
    padded_tokens: int = 0
    real_tokens_sq: int = 0
    rows: int = 0
    micro_batches: int = 0
    last_step: int | None = None
    clock: str = "host"
    device: str | None = None
    device_name: str | None = None

    def add(self, event: StepTime) -> None:
        self.step_seconds += event.step_seconds
        for part in PARTS:
            self.seconds[part] += getattr(event, part)
        self.forward += event.forward
        self.forward_wait += event.forward_wait
        self.real_tokens += event.real_tokens
        self.padded_tokens += event.padded_tokens
        self.real_tokens_sq += event.real_tokens_sq
        self.rows += event.rows
        self.micro_batches += event.micro_batches
        self.last_step = event.last_step if event.last_step is not None else self.last_step
        self.clock, self.device, self.device_name = event.clock, event.device, event.device_name

    @property
    def wall(self) -> float:
        """The training loop's time: the steps and what happened between them (start-up excluded)."""
        return sum(self.step_seconds) + sum(self.seconds[part] for part in BETWEEN)

    @property
    def in_steps(self) -> float:
        return sum(self.step_seconds)

    def share(self, part: str) -> float:
        return self.seconds[part] / self.wall if self.wall > 0 else 0.0

    @property
    def steady_step(self) -> float | None:
        """Median step once the first ones are past (all steps when there are few)."""
        steady = self.step_seconds[WARMUP_STEPS:] if len(self.step_seconds) > 2 * WARMUP_STEPS else self.step_seconds
        return statistics.median(steady) if steady else None

    @property
    def own_work(self) -> float | None:
        """Per step, what this rank does alone: waiting for its data and its forward, less the forward's wait for
        the other ranks (DDP's buffer broadcast). In data-parallel training every rank's step lasts as long as the
        slowest's (the others wait for it), so the step time cannot name a slow rank; this can."""
        steps = len(self.step_seconds)
        if not steps or self.forward <= 0:
            return None
        return (self.seconds["data_wait"] + self.forward - self.forward_wait) / steps

    @property
    def padding_share(self) -> float | None:
        total = self.real_tokens + self.padded_tokens
        return self.padded_tokens / total if total else None

    @property
    def rows_per_micro_batch(self) -> float | None:
        return self.rows / self.micro_batches if self.micro_batches else None

    @property
    def attended_length(self) -> float:
        """The length a real token attends over, averaged over tokens (sum of squared row lengths / tokens)."""
        return self.real_tokens_sq / self.real_tokens if self.real_tokens else 0.0


@dataclass
class Measured:
    ranks: dict[int, RankSteps]
    begin: RunBegin | None
    problems: list[str]
    gpu_memory: tuple[int, int] | None = None  # rank 0's allocator peak over the run, its GPU's size (CUDA runs)

    @property
    def lead(self) -> RankSteps | None:
        return self.ranks.get(0) or next(iter(self.ranks.values()), None)

    @property
    def real_tokens(self) -> int:
        return sum(r.real_tokens for r in self.ranks.values())

    @property
    def padded_tokens(self) -> int:
        return sum(r.padded_tokens for r in self.ranks.values())

    @property
    def padding_share(self) -> float | None:
        total = self.real_tokens + self.padded_tokens
        return self.padded_tokens / total if total else None

    def share(self, part: str) -> float:
        """The part's share of the training loop's time, averaged over the ranks."""
        return statistics.fmean(r.share(part) for r in self.ranks.values()) if self.ranks else 0.0


def read_measured(run_dir: Path) -> Measured:
    reader = EventReader(run_dir / EVENTS_FILE_NAME)
    ranks: dict[int, RankSteps] = {}
    begin: RunBegin | None = None
    peak, total = 0, 0
    for event in reader.read_new():
        if isinstance(event, StepTime):
            ranks.setdefault(event.rank, RankSteps(event.rank)).add(event)
        elif isinstance(event, RunBegin) and event.rank == 0:
            begin = event
        elif isinstance(event, MemoryPhase) and event.rank == 0:
            peak = max([peak, *(c.max_reserved for c in event.cuda or [])])
            total = max([total, *(g.total or 0 for g in event.nvml or [])])
    memory = (peak, total) if peak and total else None
    return Measured(dict(sorted(ranks.items())), begin, reader.problems(), memory)
