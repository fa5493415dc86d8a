"""#37 item 5: how the longest batch is said (estimate, the launch dialog, the monitor), from hand-written figures.
The step itself comes from swift on a real run: tests/watch/test_memory_creep_runs.py."""

from __future__ import annotations

from backend.launch.longest_batch import LongestBatch

GIB, MIB = 2**30, 2**20


def test_a_gpu_run_says_the_step_the_tokens_and_the_peak_of_the_card() -> None:
    found = LongestBatch(
        step=4312,
        steps=6000,
        padded_tokens=1912,
        rows=1,
        longest_row=1912,
        peak_bytes=round(71.2 * GIB),
        capacity_bytes=80 * GIB,
    )
    assert found.line() == "longest batch at step 4,312 of 6,000: 1,912 tokens, peak 71.2 of 80 GiB"


def test_a_cpu_run_says_a_small_peak_in_mib_of_the_host_ram() -> None:
    found = LongestBatch(
        step=6,
        steps=12,
        padded_tokens=1600,
        rows=4,
        longest_row=400,
        peak_bytes=612 * MIB,
        capacity_bytes=24 * GIB,
        on_host=True,
    )
    assert found.line() == (
        "longest batch at step 6 of 12: 1,600 tokens (4 rows of up to 400), peak 612.0 MiB of 24.0 GiB host RAM"
    )
