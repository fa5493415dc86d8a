"""How long does an exact model shape cost?

For each config.json given (default: the planner's fixtures for Llama-3.1-8B, gemma-2-2b,
Phi-3-mini, Mixtral-8x7B, DeepSeek-V2-Lite, DeepSeek-V2 (236 B: the slow one) and DBRX), in a fresh
oracle cache:
  first:   exact_shape() - one child process (transformers + PEFT imports, meta-device build);
  cached:  cached_shape() - the cached answer, no child (median of --repeats);
  formula: shape_from_config_dir() - the pure-Python path (median).
Prints seconds / milliseconds and the cached-vs-target ratio (target: cached under 20 ms).

    .venv/bin/python bench/model_shape_bench.py [--repeats 50] [CONFIG_DIR ...]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXTURES = REPO / "tests" / "estimate" / "fixtures"
DEFAULT = ("llama3_1_8b", "gemma2_2b", "phi3_mini", "mixtral_8x7b", "deepseek_v2_lite", "deepseek_v2", "dbrx_base")
CACHED_TARGET_MS = 20.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    folders = args.configs or [FIXTURES / name for name in DEFAULT]
    os.environ["WORKBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="shape-bench-")  # every first ask is real

    from backend.models.shape_exact import cached_shape, exact_shape

    print(f"{'model':<22} {'count':<24} {'first (child) s':>16} {'cached ms':>10} {'formula ms':>11} "
          f"{'cached/target':>14}")
    worst = 0.0
    for folder in folders:
        started = time.perf_counter()
        shape = exact_shape(folder)
        first = time.perf_counter() - started
        cached = _median_ms(functools.partial(cached_shape, folder), args.repeats)
        formula = _median_ms(functools.partial(_formula, folder), args.repeats)
        worst = max(worst, cached)
        print(f"{folder.name:<22} {shape.count_label:<24} {first:>16.2f} {cached:>10.2f} {formula:>11.3f} "
              f"{cached / CACHED_TARGET_MS:>14.2f}")
    print(f"worst cached lookup: {worst:.2f} ms (target {CACHED_TARGET_MS:.0f} ms, ratio "
          f"{worst / CACHED_TARGET_MS:.2f})")


def _formula(folder: Path) -> None:
    try:
        from backend.models.shape_formula import shape_from_config_dir

        _ = shape_from_config_dir(folder).total_params  # the property computes the count
    except ValueError:
        pass  # DBRX's config has no hidden_size: the formula path cannot size it


def _median_ms(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
