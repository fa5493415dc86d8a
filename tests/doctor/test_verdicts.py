"""The doctor's verdicts and MFU from step_time events written by hand (#38): evaluation share -> eval_steps, a
slow rank named, warm-up said as no fault, the GPU checks (micro-batch headroom, gradient checkpointing, flash
attention) on a GPU run and skipped with their reason on CPU; MFU against the datasheet, none on CPU or an unknown
GPU; a step_time line is read by every reader (no damaged line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.contract.event_writer import EventWriter
from backend.contract.events import RunBegin, StepTime, read_events
from backend.doctor.flops import TokenFlops
from backend.doctor.measure import Measured, RankSteps
from backend.doctor.peaks import gpu_peak
from backend.doctor.report import Diagnosis
from backend.doctor.verdicts import RunSettings, judge
from backend.series import load_store

GIB = 2**30


def _rank(rank: int, steps: list[float], device_name: str | None = None, **seconds: float) -> RankSteps:
    kept = RankSteps(rank)
    kept.add(StepTime(rank=rank, first_step=1, last_step=len(steps), step_seconds=steps,
                      forward_backward=sum(steps), real_tokens=1000 * len(steps), real_tokens_sq=100_000 * len(steps),
                      device_name=device_name, **seconds))  # type: ignore[arg-type]
    return kept


def _measured(*ranks: RankSteps) -> Measured:
    return Measured({r.rank: r for r in ranks}, None, [])


def test_evaluation_share_asks_for_fewer_evaluations() -> None:
    # 10 steps of 0.1 s and 1.0 s of evaluation (2 evaluations at eval_steps 5): half the time
    measured = _measured(_rank(0, [0.1] * 10, eval=1.0))
    verdict = next(v for v in judge(measured, RunSettings({"eval_steps": 5}), None, False) if v.code == "eval_share")
    # 0.5 s per evaluation is 5 % of the time at every 0.5 * 0.95 / 0.05 / 0.1 = 95 steps (a multiple of 5)
    assert verdict.change == {"training.eval_steps": 95}
    assert verdict.said == "evaluation takes 50% of wall time -> eval_steps = 95"


def test_a_slow_rank_is_named_and_warm_up_is_no_fault() -> None:
    steady = [0.1] * 10
    measured = _measured(_rank(0, [2.0] + steady), _rank(1, [2.0] + steady), _rank(2, [2.0] + [0.14] * 10))
    said = {v.code: v.said for v in judge(measured, RunSettings({}, world_size=3), None, False)}
    assert said["slow_rank"] == "rank 2 is 1.4x slower than the median of the others"
    assert said["warmup"] == "first steps 20x slower than steady: compile or warm-up, not a fault"


def test_gpu_checks_run_on_a_gpu_and_are_skipped_with_their_reason_on_cpu() -> None:
    measured = _measured(_rank(0, [0.1] * 10, device_name="NVIDIA H100 80GB HBM3"))
    settings = RunSettings({"per_device_train_batch_size": 2, "gradient_checkpointing": True, "attn_impl": None})
    found = {v.code: v for v in judge(measured, settings, gpu_peak("NVIDIA H100 80GB HBM3"), True,
                                      (20 * GIB, 80 * GIB))}
    assert found["micro_batch"].said == "measured peak 20 of 80 GiB at micro-batch 2 -> micro-batch 4 fits"
    assert found["micro_batch"].change == {"training.per_device_train_batch_size": 4}
    assert found["checkpointing"].change == {"training.gradient_checkpointing": False}
    assert found["flash_attention"].change == {"extra_swift_args.attn_impl": "flash_attn"}
    on_cpu = judge(_measured(_rank(0, [0.1] * 10)), settings, None, False)
    assert {v.code: v.skipped for v in on_cpu if v.skipped} == {
        "micro_batch": "no GPU in this run: it reads the GPU's measured peak memory against its size",
        "checkpointing": "no GPU in this run: recompute is only worth removing when GPU memory allows",
        "flash_attention": "no GPU in this run: FlashAttention runs on NVIDIA GPUs of compute capability 8.0 or "
                           "newer"}


def _diagnosis(device_name: str | None) -> Diagnosis:
    measured = _measured(_rank(0, [0.5] * 10, device_name=device_name))  # 1000 real tokens per 0.5 s step
    flops = TokenFlops(base_matmul_params=0, adapter_params=0, attention_per_token=0.0, model=6e9, hardware=8e9,
                       sequence=100.0, tuner="full", recompute=True)
    return Diagnosis("r", measured, RunSettings({}), flops, "", gpu_peak(device_name), "bf16", [])


def test_mfu_divides_model_flops_by_the_datasheet_peak_and_says_why_there_is_none() -> None:
    # 2000 real tokens/s x 6e9 FLOPs = 12 TFLOP/s of A100's 312: 3.85 %; with recompute 16 TFLOP/s: 5.13 %
    mfu, said = _diagnosis("NVIDIA A100-SXM4-80GB").mfu()
    assert mfu == pytest.approx(2000 * 6e9 / 312e12)
    assert said == "MFU 3.8% of A100's 312 TFLOPS (bf16, datasheet), HFU 5.1% with recompute"
    assert _diagnosis(None).mfu() == (None, "MFU: none on CPU (no datasheet peak for a CPU); tokens/s and FLOPs per "
                                            "token hold")
    assert _diagnosis("Tesla T4").mfu() == (None, "MFU: unknown GPU 'Tesla T4' (not in the datasheet table)")


def test_a_step_time_line_is_read_whole_by_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer.write("run_begin", max_steps=2)
    writer.write("log", step=1, loss=1.0)
    writer.write("step_time", first_step=1, last_step=1, step_seconds=[0.2], data_wait=0.05, real_tokens=30,
                 padded_tokens=10, real_tokens_sq=500)
    [_, _, timed] = read_events(path)
    assert isinstance(timed, StepTime) and (timed.real_tokens, timed.padded_tokens) == (30, 10)
    store = load_store(path)
    assert store.bad_lines == 0


def test_in_data_parallel_the_rank_the_others_wait_for_is_named_by_its_own_work() -> None:
    # both ranks' steps last 0.12 s; rank 0 spent 0.09 s of each forward waiting for rank 1 at the buffer broadcast
    waiting = _rank(0, [0.12] * 10, forward=1.0, forward_wait=0.9)
    slow = _rank(1, [0.12] * 10, forward=1.0)
    said = {v.code: v for v in judge(_measured(waiting, slow), RunSettings({}, world_size=2), None, False)}
    assert said["slow_rank"].said == ("rank 1 is 10.0x slower than the median of the others at its own work: the "
                                      "others wait for it")
    assert said["slow_rank"].evidence == ("own work per step (data wait + forward, less waiting for the others): "
                                          "0.100 s on rank 1, 0.010 s on the others (median)")


def _padded(train_rows: int | None) -> Measured:
    """4 steps of one micro-batch of 8 rows each: 2,000 real tokens and 2,000 padding (half)."""
    kept = RankSteps(0)
    kept.add(StepTime(rank=0, first_step=1, last_step=4, step_seconds=[0.1] * 4, forward_backward=0.4,
                      real_tokens=2000, padded_tokens=2000, rows=32, micro_batches=4))
    return Measured({0: kept}, RunBegin(rank=0, train_rows=train_rows), [])


def test_padding_with_every_row_in_one_micro_batch_asks_for_smaller_ones_grouped_by_length() -> None:
    # 8 training rows, 8 a micro-batch: every batch is the same 8 rows, so grouping alone changes nothing;
    # 4 a micro-batch and 2 micro-batches a step keep the 8 rows a step and let like lengths share a batch
    settings = RunSettings({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1})
    (padding,) = [v for v in judge(_padded(8), settings, None, False) if v.code == "padding"]
    assert padding.change == {"training.per_device_train_batch_size": 4, "training.gradient_accumulation_steps": 2,
                              "extra_swift_args.group_by_length": True}
    assert padding.said == ("pad 50% of tokens -> every micro-batch holds all 8 rows, so rows of like length can "
                            "share one only in smaller ones: 4 rows a micro-batch, 2 micro-batches a step (the same "
                            "8 rows a step), grouped by length")


def test_padding_with_more_rows_than_a_micro_batch_asks_for_grouping_alone() -> None:
    settings = RunSettings({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1})
    for rows in (64, None):  # more rows than a micro-batch, or a streamed set whose rows are not counted
        (padding,) = [v for v in judge(_padded(rows), settings, None, False) if v.code == "padding"]
        assert padding.change == {"extra_swift_args.group_by_length": True}
