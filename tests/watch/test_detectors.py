"""The detectors, fed hand-written event streams and readings (no processes, no files)."""

from __future__ import annotations

import msgspec

from backend.contract.events import Event
from backend.watch.loss_detectors import DivergenceDetector, LossScaleDetector, NonfiniteDetector
from backend.watch.machine_detectors import DiskDetector, GpuMemoryDetector, HostMemoryDetector
from backend.watch.progress_detectors import HangDetector, ThroughputDetector

GiB = 2**30


def event(fields: dict) -> Event:
    """A hand-written event, checked by the events schema as a line of the file would be."""
    return msgspec.convert(fields, Event)


def log(step: int, **fields: object) -> Event:
    return event({"type": "log", "rank": 0, "step": step, "nonfinite": [], **fields})


def test_nonfinite_loss_once_until_finite_again() -> None:
    d = NonfiniteDetector()
    d.on_event(event({"type": "run_begin", "rank": 0, "scaler": None}))
    assert d.on_event(log(1, loss=2.0)) == []
    found = d.on_event(log(2, loss=None, nonfinite=["loss"]))
    assert [(f.kind, f.step, f.evidence["nonfinite"]) for f in found] == [("nonfinite", 2, ["loss"])]
    assert d.on_event(log(3, loss=None, nonfinite=["loss"])) == []  # still NaN: no second alert
    assert d.on_event(log(4, loss=1.5)) == []
    assert [f.step for f in d.on_event(log(5, loss=None, nonfinite=["loss", "grad_norm"]))] == [5]


def test_nonfinite_grad_norm_counts_only_without_a_loss_scaler() -> None:
    fp32 = NonfiniteDetector()
    fp32.on_event(event({"type": "run_begin", "rank": 0, "scaler": None}))
    assert [f.step for f in fp32.on_event(log(7, loss=3.0, nonfinite=["grad_norm"]))] == [7]
    fp16 = NonfiniteDetector()
    fp16.on_event(event({"type": "run_begin", "rank": 0, "scaler": "GradScaler"}))
    assert fp16.on_event(log(7, loss=3.0, nonfinite=["grad_norm"])) == []  # an overflowed, skipped step


def test_divergence_when_the_ema_triples_within_the_window() -> None:
    d = DivergenceDetector(factor=3.0, window=50, alpha=0.5)
    found = []
    # 1.0 steady for 10 steps, then 10.0: EMA 1 -> 5.5 -> 7.75 ... crosses 3.0 at the first high point
    for step in range(1, 11):
        found += d.on_event(log(step, loss=1.0))
    assert found == []
    found += d.on_event(log(11, loss=10.0))
    assert [(f.step, round(f.evidence["ema"], 2), f.evidence["lowest_ema_in_window"]) for f in found] == [(11, 5.5, 1.0)]
    assert d.on_event(log(12, loss=10.0)) == []  # one alert per episode


def test_a_noisy_loss_around_the_threshold_is_one_alert_per_window() -> None:
    d = DivergenceDetector(factor=3.0, window=50, alpha=0.5)
    found = []
    for step in range(1, 11):
        found += d.on_event(log(step, loss=1.0))
    # then a spike of 10 every 4th step (11, 15, 19 ...): the EMA (alpha 0.5) goes 5.5, 3.25, 2.1, 1.6, 5.8 ... so it
    # crosses 3x the window's lowest up and down every 4 steps (the old latch alone: an alert at each spike,
    # 15 of them by step 69). Spikes before step 61 lie within 50 steps of the first alert; 63 does not.
    for step in range(11, 70):
        found += d.on_event(log(step, loss=10.0 if (step - 11) % 4 == 0 else 1.0))
    assert [f.step for f in found] == [11, 63]


def test_falling_loss_never_diverges() -> None:
    d = DivergenceDetector(factor=3.0, window=50)
    assert sum((d.on_event(log(s, loss=6.0 / s)) for s in range(1, 200)), []) == []


def test_loss_scale_floor_and_overflow_run_with_logging_every_step() -> None:
    d = LossScaleDetector(minimum=20.0, overflow_run=3)
    seen = []
    for step, scale, count in [(1, 64, 0), (2, 64, 0), (3, 64, 0), (4, 32, 1), (5, 16, 2), (6, 8, 3), (7, 8, 3)]:
        seen += [(f.step, f.message) for f in d.on_event(log(step, loss=1.0, loss_scale=scale, overflow_count=count))]
    assert seen == [(5, "loss scale collapsed to 16 (below 20) at step 5"),
                    (6, "3 overflowed steps in a row (steps 4-6): every one was skipped")]


def test_overflow_run_seen_through_sparse_logging() -> None:
    d = LossScaleDetector(minimum=1.0, overflow_run=8)
    assert d.on_event(log(5, loss_scale=1024.0, overflow_count=0)) == []
    assert d.on_event(log(10, loss_scale=32.0, overflow_count=5)) == []  # steps 6-10 all overflowed
    found = d.on_event(log(15, loss_scale=1.0, overflow_count=10))
    assert [(f.evidence["overflows_in_a_row"], f.evidence["first_step"]) for f in found] == [(10, 6)]
    # a record with fewer overflows than steps ends the run
    d.on_event(log(20, loss_scale=2.0, overflow_count=12))
    assert d.run_length == 0


def test_hang_limit_is_factor_times_median_interval_with_a_floor() -> None:
    d = HangDetector(factor=10.0, min_seconds=5.0)
    d.on_event(event({"type": "run_begin", "rank": 0}), now=100.0)
    assert d.on_tick(104.0) == [] and d.threshold() == 5.0
    for i, t in enumerate([105.0, 106.0, 107.0, 108.0]):  # one second per logged step
        d.on_event(log(i + 1), now=t)
    assert d.threshold() == 10.0
    assert d.on_tick(117.9) == []
    found = d.on_tick(118.5)
    assert [(f.step, f.evidence["silent_seconds"], f.evidence["limit_seconds"]) for f in found] == [(4, 10.5, 10.0)]
    assert d.on_tick(130.0) == []  # once per silence
    d.on_event(log(5), now=131.0)
    assert d.on_tick(135.0) == []


def test_hang_ignores_other_ranks_and_counts_checkpoints_as_progress() -> None:
    d = HangDetector(factor=2.0, min_seconds=1.0)
    d.on_event(log(1), now=0.0)
    d.on_event(event({"type": "checkpoint", "rank": 0, "step": 1}), now=5.0)
    assert d.on_tick(5.5) == []
    d.on_event(msgspec.structs.replace(log(2), rank=1), now=6.0)
    assert [f.kind for f in d.on_tick(6.5)] == ["hang"]


def test_throughput_drop_for_three_records() -> None:
    d = ThroughputDetector(fraction=0.5, window=3)
    events = [log(s, steps_per_second=4.0) for s in range(1, 8)]  # the first is ignored (warm-up)
    events += [log(8, steps_per_second=1.0), log(9, steps_per_second=1.5), log(10, steps_per_second=1.9)]
    found = sum((d.on_event(e) for e in events), [])
    assert [(f.step, f.evidence["median_steps_per_second"]) for f in found] == [(10, 4.0)]


def test_throughput_ignores_the_record_after_a_checkpoint() -> None:
    d = ThroughputDetector(fraction=0.5, window=1)
    for s in range(1, 8):
        d.on_event(log(s, steps_per_second=4.0))
    d.on_event(event({"type": "checkpoint", "rank": 0, "step": 7}))
    assert d.on_event(log(8, steps_per_second=0.5)) == []


def test_throughput_ignores_the_records_while_a_job_of_the_run_runs_beside_it() -> None:
    """A golden-prompts job shares the run's CPU: its slow records (0.4 of a 4.0 median) raise nothing, nor
    does the one after it ends (it still holds some of the job's time); alone, the same pace is an alert."""
    job_running = [False]
    d = ThroughputDetector(fraction=0.5, window=3, beside=lambda: job_running[0])
    for s in range(1, 8):
        d.on_event(log(s, steps_per_second=4.0))
    job_running[0] = True
    during = sum((d.on_event(log(s, steps_per_second=0.4)) for s in range(8, 14)), [])
    job_running[0] = False
    after = sum((d.on_event(log(s, steps_per_second=0.4)) for s in range(14, 17)), [])
    assert during == []
    assert [f.step for f in after] == []  # 14 skipped, 15 and 16 low: two of the three records the window needs
    assert [f.step for f in d.on_event(log(17, steps_per_second=0.4))] == [17]


def test_memory_and_disk_readings() -> None:
    gpu = GpuMemoryDetector(fraction=0.9)
    assert gpu.on_sample([(0, 70 * GiB, 80 * GiB)], step=3) == []
    assert [f.evidence["gpu"] for f in gpu.on_sample([(0, 75 * GiB, 80 * GiB), (1, None, None)], step=4)] == [0]
    assert gpu.on_sample([(0, 76 * GiB, 80 * GiB)], step=5) == []
    host = HostMemoryDetector(min_fraction=0.05)
    found = host.on_sample(available=2 * GiB, total=64 * GiB, step=9)
    assert [f.message for f in found] == ["host RAM low: 2.0 GiB available of 64.0 GiB (3%); the kernel's OOM killer is next"]
    disk = DiskDetector(margin=1.2)
    assert disk.on_sample(free=13 * GiB, next_checkpoint=10 * GiB, folder="/out", step=100) == []
    found = disk.on_sample(free=11 * GiB, next_checkpoint=10 * GiB, folder="/out", step=200)
    assert [f.message for f in found] == ["disk low on /out: 11.0 GiB free, the next checkpoint needs about 10.0 GiB"]
    assert disk.on_sample(free=5 * GiB, next_checkpoint=10 * GiB, folder="/out", step=300) == []  # still low


def test_a_small_checkpoint_is_said_in_its_own_unit() -> None:
    disk = DiskDetector(margin=1.2)
    found = disk.on_sample(free=40 * 2**20, next_checkpoint=35 * 2**20, folder="/out", step=7)
    assert [f.message for f in found] == ["disk low on /out: 40.0 MiB free, the next checkpoint needs about 35.0 MiB"]


def test_hang_disarmed_by_run_end_and_postponed_by_other_progress() -> None:
    d = HangDetector(factor=2.0, min_seconds=1.0)
    d.on_event(log(1), now=0.0)
    d.note_progress(10.0)  # e.g. the trainer's heartbeat during a long evaluation
    assert d.on_tick(10.5) == []
    assert [f.kind for f in d.on_tick(11.5)] == ["hang"]
    d.on_event(event({"type": "run_end", "rank": 0, "step": 1}), now=12.0)
    assert d.on_tick(1000.0) == []
