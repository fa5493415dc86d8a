"""Question `batch_order`: at which optimizer step the largest batch arrives (child side, #37 item 5).

`{"command": "sft", "argv": [...], "world_size": N}` -> the steps of the run and its largest micro-batch:
`{"built", "problem", "rows", "steps", "micro_batches_per_step", "largest": {step, rank, rows, longest_row,
padded_tokens}, "most_tokens": {step, tokens}, "seconds"}`.

Nothing about the order is re-typed: swift builds its own argument object from the launch's argv
(backend/oracle/swift_build.py), loads the data with its own `args.load_dataset()` (its shuffle with
`data_seed`), encodes it with its own `AddLengthPreprocessor` (swift/pipelines/train/sft.py
`_encode_dataset`: the rows it cannot encode are dropped there, `lengths` added), and its own
`BatchSamplerShard` (swift/trainers/mixin.py `get_train_dataloader`: shuffle, data_seed + epoch through
`set_epoch`, drop_last, group_by_length) yields each rank's micro-batches. The micro-batches of an
epoch are grouped into optimizer steps as transformers' `_inner_training_loop` does (trainer.py: groups of
`gradient_accumulation_steps`, the epoch's last group the remainder; the run ends at `max_steps`, else
ceil(epochs x steps per epoch)). A micro-batch is padded to its longest row (swift's collator), so its
tokens are rows x longest row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()
    progress("asking swift to build the run's arguments (no weights loaded)")
    import swift.arguments as arguments

    from backend.oracle.swift_args import build_parser
    from backend.oracle.swift_build import CLASSES, _build

    parser = build_parser(getattr(arguments, CLASSES[payload.get("command", "sft")]))
    args, problem = _build(parser, [str(word) for word in payload.get("argv", [])])
    if problem is not None:
        return {"built": False, "problem": problem.get("message"), "seconds": _since(started)}
    if getattr(args, "packing", False) or getattr(args, "streaming", False):
        return {
            "built": True,
            "problem": "packed or streamed data: every batch has the same length",
            "seconds": _since(started),
        }
    progress("loading and encoding the data with swift's own loader and template")
    lengths = _lengths(args)
    world = max(1, int(payload.get("world_size", 1)))
    order = _steps(args, lengths, world)
    return {"built": True, "problem": None, "rows": len(lengths), **order, "seconds": _since(started)}


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 2)


def _lengths(args: Any) -> list[int]:
    """Each kept row's encoded length, in the dataset's order, as swift's training pipeline computes it."""
    from swift.dataset import AddLengthPreprocessor

    train, _ = args.load_dataset()
    template = args.get_template()
    template.set_mode("train")
    encoded = AddLengthPreprocessor(template=template)(train, num_proc=None, load_from_cache_file=False, strict=False)
    return [max(n) if isinstance(n, list) else int(n) for n in encoded["lengths"]]


def _sampler(args: Any, lengths: list[int], rank: int, world: int) -> Any:
    """swift's own batch sampler, as rank `rank` of `world` builds it (no process group in this child)."""
    from swift.dataloader.shard import BatchSamplerShard

    class RankSampler(BatchSamplerShard):
        @property
        def rank(self) -> int:
            return rank

        @property
        def world_size(self) -> int:
            return world

    extra = {"group_by_length": True, "lengths": lengths} if getattr(args, "group_by_length", False) else {}
    return RankSampler(
        len(lengths),
        batch_size=args.per_device_train_batch_size,
        drop_last=args.dataloader_drop_last,
        shuffle=args.train_dataloader_shuffle,
        data_seed=args.data_seed,
        **extra,
    )


def _epoch_batches(args: Any, lengths: list[int], world: int, epoch: int) -> list[list[list[int]]]:
    """Each micro-batch of the epoch (its rows' lengths), per rank: [micro-batch][rank] -> lengths."""
    per_rank = []
    for rank in range(world):
        sampler = _sampler(args, lengths, rank, world)
        sampler.set_epoch(epoch)
        per_rank.append([[lengths[i] for i in batch] for batch in sampler])
    count = min(len(batches) for batches in per_rank)
    return [[per_rank[rank][n] for rank in range(world)] for n in range(count)]


def _updates(args: Any, lengths: list[int], world: int) -> Iterator[tuple[int, list[list[list[int]]]]]:
    """(optimizer step, its micro-batches) in the order the trainer runs them."""
    accumulation = max(1, int(args.gradient_accumulation_steps))
    first = _epoch_batches(args, lengths, world, 0)
    per_epoch = max(len(first) // accumulation + int(len(first) % accumulation > 0), 1)
    max_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * per_epoch)
    step, epoch, batches = 0, 0, first
    while step < max_steps and batches:
        for start in range(0, len(batches), accumulation):
            step += 1
            yield step, batches[start : start + accumulation]
            if step >= max_steps:
                return
        epoch += 1
        batches = _epoch_batches(args, lengths, world, epoch)


def _steps(args: Any, lengths: list[int], world: int) -> dict[str, Any]:
    largest: dict[str, Any] = {"padded_tokens": 0}
    most: dict[str, Any] = {"tokens": 0}
    steps = 0
    for step, micro_batches in _updates(args, lengths, world):
        steps = step
        tokens = sum(sum(rows) for ranks in micro_batches for rows in ranks)
        if tokens > most["tokens"]:
            most = {"step": step, "tokens": tokens}
        for ranks in micro_batches:
            for rank, rows in enumerate(ranks):
                padded = len(rows) * max(rows, default=0)
                if padded > largest["padded_tokens"]:
                    largest = {
                        "step": step,
                        "rank": rank,
                        "rows": len(rows),
                        "longest_row": max(rows),
                        "padded_tokens": padded,
                    }
    return {
        "steps": steps,
        "micro_batches_per_step": int(args.gradient_accumulation_steps),
        "largest": largest if steps else None,
        "most_tokens": most if steps else None,
    }
