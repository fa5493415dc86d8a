"""Memory that creeps at equal batch length, told apart from a long batch (#37 item 6).

Fed every rank-0 `step_time` event: each step's largest micro-batch and the memory after its forward
(backend/estimate/creep.py says what is creep and what is the batch). Raised once per run: the rate at equal
length and the step where it would reach the GPU's or the machine's memory."""

from __future__ import annotations

from backend.contract.events import Event, StepTime
from backend.core.units import MIB
from backend.estimate.creep import StepMemory, creep, step_points
from backend.watch.finding import Finding

MAX_POINTS = 8192  # a long run keeps every other step once past it: the rate is unchanged, the memory bounded


class MemoryCreepDetector:
    kind = "memory_creep"

    def __init__(self, min_mib: float, min_steps: int) -> None:
        self.min_bytes = min_mib * MIB
        self.min_steps = min_steps
        self.points: list[StepMemory] = []
        self.limit: int | None = None
        self.memory_kind: str | None = None
        self.raised = False

    def on_event(self, event: Event) -> list[Finding]:
        if not isinstance(event, StepTime) or event.rank != 0 or self.raised:
            return []
        self.points += step_points(event)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
        self.limit = event.memory_limit or self.limit
        self.memory_kind = event.memory_kind or self.memory_kind
        found = creep(self.points, self.limit, self.memory_kind, min_growth=self.min_bytes, min_steps=self.min_steps)
        if found is None:
            return []
        self.raised = True
        return [
            Finding(
                self.kind,
                found.line(),
                found.last_step,
                {
                    "bytes_per_1000_steps": round(found.bytes_per_step * 1000),
                    "equal_length_steps": found.equal_steps,
                    "growth_bytes": round(found.growth_bytes),
                    "oom_step": found.oom_step,
                    "limit_bytes": self.limit,
                    "memory": self.memory_kind,
                },
            )
        ]
