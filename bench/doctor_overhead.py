"""What the throughput doctor's measurement costs a training step (#38): the tiny built-in Qwen2 trained in this
process (real forward, backward and AdamW step on CPU), the trainer's loop driven the way transformers drives it,
in alternating pairs of blocks: with backend/plugin/step_timing.py's wrappers and callbacks (and its step_time
event written every 5 steps, as at logging_steps 5) and without. Prints the median ratio over the pairs, and
the measurement's own cost per step timed directly (the steady figure on a busy machine).

    .venv/bin/python bench/doctor_overhead.py [--pairs 12] [--steps 20] [--batch 4] [--length 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from backend.contract.events import EventWriter  # noqa: E402
from backend.models.demo.build import ensure_builtin_model  # noqa: E402
from backend.plugin.step_timing import StepTiming  # noqa: E402


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


def run_block(trainer: LoopTrainer, timing: StepTiming | None, steps: int, start: int) -> float:
    """`steps` optimizer steps of the trainer's loop; seconds taken."""
    state, control = SimpleNamespace(global_step=start), SimpleNamespace()
    batches = iter([trainer.batch] * steps)
    began = time.perf_counter()
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
    return time.perf_counter() - began


def hook_cost(timing: StepTiming, batch: dict[str, torch.Tensor], calls: int = 2000) -> float:
    """Seconds per step of the measurement alone: the wrappers around no-op work, the callbacks, the counting."""
    state, control = SimpleNamespace(global_step=0), SimpleNamespace()
    inner: Any = SimpleNamespace(get_batch_samples=lambda it, n, d=None: ([batch], None),
                                 compute_loss=lambda m, inputs: None,
                                 accelerator=SimpleNamespace(device=torch.device("cpu")))
    inner.training_step = lambda m, inputs, *a: inner.compute_loss(m, inputs)
    probe = StepTiming(inner, timing.writer)
    began = time.perf_counter()
    for _ in range(calls):
        samples, _ = inner.get_batch_samples(None, 1)
        inner.training_step(None, samples[0])
        probe.on_pre_optimizer_step(None, state, control)
        probe.on_optimizer_step(None, state, control)
        state.global_step += 1
        probe.on_step_end(None, state, control)
        if state.global_step % 5 == 0:
            probe.on_log(None, state, control, logs={"loss": 1.0})
    return (time.perf_counter() - began) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ensure_builtin_model("tiny-qwen2"), dtype=torch.float32)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.length))
    mask = torch.ones_like(ids)
    mask[1:, args.length // 2:] = 0  # some padding, as real batches have
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    plain, timed = LoopTrainer(model, batch), LoopTrainer(model, batch)
    with tempfile.TemporaryDirectory() as folder:
        writer = EventWriter(Path(folder) / "events.jsonl")
        timing = StepTiming(timed, writer)
        run_block(plain, None, args.steps, 0)  # warm-up
        run_block(timed, timing, args.steps, 0)
        ratios, step_times = [], []
        for pair in range(args.pairs):
            first, second = (plain, timed) if pair % 2 == 0 else (timed, plain)
            seconds = {id(t): run_block(t, timing if t is timed else None, args.steps, 0) for t in (first, second)}
            ratios.append(seconds[id(timed)] / seconds[id(plain)])
            step_times.append(seconds[id(plain)] / args.steps)
        direct = hook_cost(timing, batch)
        writer.close()
    step = statistics.median(step_times)
    print(f"tiny-qwen2, batch {args.batch} x {args.length} tokens, {args.pairs} alternating pairs of "
          f"{args.steps} steps: step {step * 1e3:.1f} ms without the measurement")
    print(f"overhead ratio (with / without, median of pairs): {statistics.median(ratios):.4f} "
          f"(pairs from {min(ratios):.3f} to {max(ratios):.3f})")
    print(f"the measurement alone: {direct * 1e6:.1f} us per step = {direct / step:.3%} of a step")


if __name__ == "__main__":
    main()
