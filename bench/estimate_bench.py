"""How long does one memory forecast cost? (moved here from tests: a timing is a measurement, not a test)

For Llama-2-70B (FSDP on 8 GPUs, full / LoRA / QLoRA) and Qwen2.5-7B with the fit search (largest batch
and length on an 80 GiB GPU), from the planner's config.json fixtures: the mean of --repeats estimates after
one warm-up, in milliseconds, and its ratio to the 50 ms requirement (the TUI re-forecasts on every edit).

    .venv/bin/python bench/estimate_bench.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXTURES = REPO / "tests" / "estimate" / "fixtures"
TARGET_MS = 50.0
GIB = 2**30


def mean_ms(call, repeats: int) -> float:  # noqa: ANN001
    call()  # warm imports and caches
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    from backend.estimate import EstimateRequest, estimate
    from backend.models.shape_formula import shape_from_config_dir

    llama70b = shape_from_config_dir(FIXTURES / "llama2_70b")
    qwen7b = shape_from_config_dir(FIXTURES / "qwen2_5_7b")
    cases = {f"llama2-70b fsdp x8 {tuner}": (llama70b, EstimateRequest(tuner=tuner, distribution="fsdp", num_gpus=8))
             for tuner in ("full", "lora", "qlora")}
    cases["qwen2.5-7b + fit search 80 GiB"] = (qwen7b, EstimateRequest(gpu_memory_bytes=80 * GIB))
    print(f"{'case':<32} {'mean ms':>9} {'ratio to 50 ms':>15}")
    worst = 0.0
    for name, (shape, request) in cases.items():
        ms = mean_ms(functools.partial(estimate, shape, request), args.repeats)
        worst = max(worst, ms)
        print(f"{name:<32} {ms:>9.3f} {ms / TARGET_MS:>15.4f}")
    print(f"worst: {worst:.3f} ms (target {TARGET_MS:.0f} ms, ratio {worst / TARGET_MS:.4f})")


if __name__ == "__main__":
    main()
