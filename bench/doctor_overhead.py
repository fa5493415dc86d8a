"""What the throughput doctor's measurement costs a training step (#38): the tiny built-in Qwen2 trained in this
process (real forward, backward and AdamW step on CPU), the trainer's loop driven the way transformers drives it,
with backend/plugin/step_timing.py's wrappers and callbacks (its step_time event written every 5 steps, as at
logging_steps 5).

The figure (direct): inside that run, every piece of the measurement's own work is timed as it happens: each
callback call, and each wrapper's time less the time of the method it wraps (the trainer's own methods are timed
under the wrappers, so a wrapper's own work is outer minus inner). The timers' own cost is calibrated on empty
calls and taken off. The sum per step is divided by the measured step time of the same run. A shared machine's
noise cannot hide a cost measured this way: it is the measurement's own seconds, not a difference of two runs.

The check (secondary): alternating blocks of steps without the measurement (A), with it (B) and without it again
(A'), in rotating order; the median B/A ratio is printed with the noise band of A'/A (the same code twice: what
"no difference" looks like on this machine now). A B/A outside the band is a cost the direct figure missed.

    .venv/bin/python bench/doctor_overhead.py [--rounds 8] [--steps 20] [--batch 4] [--length 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from backend.contract.event_writer import EventWriter  # noqa: E402
from backend.models.demo.build import ensure_builtin_model  # noqa: E402
from backend.plugin.step_timing import StepTiming  # noqa: E402

WRAPPED = ("get_batch_samples", "training_step", "compute_loss")
CALLBACKS = ("on_pre_optimizer_step", "on_optimizer_step", "on_step_end", "on_log")


class LoopTrainer:
    """The parts of transformers' Trainer the step timing wraps, doing the real work of a step."""

    def __init__(self, model: Any, batch: dict[str, torch.Tensor]) -> None:
        self.model, self.batch = model, batch
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.accelerator = SimpleNamespace(device=torch.device("cpu"))

    def get_batch_samples(self, iterator: Any, num_batches: int, device: Any = None) -> tuple[list, None]:
        return [next(iterator) for _ in range(num_batches)], None

    def compute_loss(self, model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**inputs).loss

    def training_step(self, model: Any, inputs: dict[str, torch.Tensor], *args: Any) -> torch.Tensor:
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()


class Ledger:
    """Seconds spent per named piece (wall, and this thread's CPU: on a loaded machine the wall time of a span
    also holds the time the process waited for a core), and calls."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.cpu: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)

    def clear(self) -> None:
        self.seconds.clear()
        self.cpu.clear()
        self.calls.clear()

    def timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def clocked(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                cpu_end = time.thread_time()
                wall_end = time.perf_counter()
                self.seconds[name] += wall_end - wall
                self.cpu[name] += cpu_end - cpu
                self.calls[name] += 1

        return clocked


def instrumented(trainer: LoopTrainer, writer: EventWriter, ledger: Ledger) -> StepTiming:
    """The step timing installed as the plugin installs it, with the trainer's own methods timed under its
    wrappers ("inner") and its wrappers and callbacks timed from outside ("outer")."""
    for name in WRAPPED:
        setattr(trainer, name, ledger.timed(f"inner:{name}", getattr(trainer, name)))
    timing = StepTiming(trainer, writer)
    for name in WRAPPED:
        setattr(trainer, name, ledger.timed(f"outer:{name}", getattr(trainer, name)))
    for name in CALLBACKS:
        setattr(timing, name, ledger.timed(f"callback:{name}", getattr(timing, name)))
    return timing


def run_block(trainer: LoopTrainer, timing: StepTiming | None, steps: int) -> tuple[float, float]:
    """`steps` optimizer steps of the trainer's loop; (seconds taken, the process's CPU seconds: every thread)."""
    state, control = SimpleNamespace(global_step=0), SimpleNamespace()
    batches = iter([trainer.batch] * steps)
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        samples, _ = trainer.get_batch_samples(batches, 1)
        for inputs in samples:
            trainer.training_step(trainer.model, inputs)
        if timing:
            timing.on_pre_optimizer_step(None, state, control)
        trainer.optimizer.step()
        if timing:
            timing.on_optimizer_step(None, state, control)
        trainer.optimizer.zero_grad()
        state.global_step += 1
        if timing:
            timing.on_step_end(None, state, control)
            if state.global_step % 5 == 0:
                timing.on_log(None, state, control, logs={"loss": 1.0})
    return time.perf_counter() - began, time.process_time() - cpu


def timer_bias(clock: str, calls: int = 20000) -> tuple[float, float]:
    """Per call, the seconds the ledger itself adds on `clock` ("seconds" or "cpu"), taken off the figure: (the
    span of its clock reads with nothing between them, as around a callback, whose call is the measurement's own
    cost; an outer-minus-inner pair of timers around an empty function, as each wrapper is measured)."""
    ledger = Ledger()
    empty: Callable[[], None] = lambda: None  # noqa: E731
    twice = ledger.timed("outer", ledger.timed("inner", empty))
    for _ in range(calls):
        twice()
        wall, cpu = time.perf_counter(), time.thread_time()
        cpu_end = time.thread_time()
        wall_end = time.perf_counter()
        ledger.seconds["null"] += wall_end - wall
        ledger.cpu["null"] += cpu_end - cpu
    kept = getattr(ledger, clock)
    return kept["null"] / calls, (kept["outer"] - kept["inner"]) / calls


def own_seconds(ledger: Ledger, clock: str) -> dict[str, float]:
    """The measurement's own seconds per piece on `clock` ("seconds": wall, "cpu": this thread's), the timers'
    bias taken off."""
    kept = getattr(ledger, clock)
    callback_bias, pair_bias = timer_bias(clock)
    own = {
        name: max(0.0, kept[f"outer:{name}"] - kept[f"inner:{name}"] - pair_bias * ledger.calls[f"outer:{name}"])
        for name in WRAPPED
    }
    for name in CALLBACKS:
        key = f"callback:{name}"
        own[name] = max(0.0, kept[key] - callback_bias * ledger.calls[key])
    return own


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8, help="rounds of A, B, A' blocks (alternating pairs)")
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ensure_builtin_model("tiny-qwen2"), dtype=torch.float32)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.length))
    mask = torch.ones_like(ids)
    mask[1:, args.length // 2 :] = 0  # some padding, as real batches have
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    plain, timed = LoopTrainer(model, batch), LoopTrainer(model, batch)
    ledger = Ledger()
    with tempfile.TemporaryDirectory() as folder:
        writer = EventWriter(Path(folder) / "events.jsonl")
        timing = instrumented(timed, writer, ledger)
        run_block(plain, None, args.steps)  # warm-up, then the ledger starts empty
        run_block(timed, timing, args.steps)
        ledger.clear()
        blocks: dict[str, list[tuple[float, float]]] = {"A": [], "B": [], "A'": []}
        for round_ in range(args.rounds):
            order = [("A", plain, None), ("B", timed, timing), ("A'", plain, None)]
            order = order[round_ % 3 :] + order[: round_ % 3]  # each kind in each place as often
            for name, trainer, hooks in order:
                blocks[name].append(run_block(trainer, hooks, args.steps))
        writer.close()
    report(args, blocks, ledger)


def report(args: argparse.Namespace, blocks: dict[str, list[tuple[float, float]]], ledger: Ledger) -> None:
    steps = args.rounds * args.steps
    step_wall = sum(wall for wall, _ in blocks["B"]) / steps  # the same run's measured step
    step_cpu = sum(cpu for _, cpu in blocks["B"]) / steps
    wall, cpu = own_seconds(ledger, "seconds"), own_seconds(ledger, "cpu")
    own_wall, own_cpu = sum(wall.values()) / steps, sum(cpu.values()) / steps
    print(
        f"tiny-qwen2, batch {args.batch} x {args.length} tokens, {args.rounds} rounds of {args.steps} steps "
        f"each (A without, B with the measurement, A' without)"
    )
    print(
        f"direct: the measurement's own work {own_wall * 1e6:.1f} us per step against the same run's step of "
        f"{step_wall * 1e3:.1f} ms: {own_wall / step_wall:.3%} of a step (wall clock)"
    )
    print(
        f"        CPU: {own_cpu * 1e6:.1f} us per step against the step's {step_cpu * 1e3:.1f} ms of CPU (every "
        f"thread): {own_cpu / step_cpu:.3%}"
    )
    print(
        "  per piece, us per step (wall / CPU): "
        + ", ".join(f"{name} {wall[name] / steps * 1e6:.1f} / {cpu[name] / steps * 1e6:.1f}" for name in wall)
    )
    a, b, again = ([w for w, _ in blocks[k]] for k in ("A", "B", "A'"))
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    noise = [y / x for x, y in zip(a, again, strict=True)]
    print(
        f"check: B/A median {statistics.median(ratios):.4f} (from {min(ratios):.3f} to {max(ratios):.3f}); "
        f"noise band A'/A (the same code twice) from {min(noise):.3f} to {max(noise):.3f}, median "
        f"{statistics.median(noise):.4f}"
    )


if __name__ == "__main__":
    main()
