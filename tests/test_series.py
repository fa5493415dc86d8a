"""The metrics store against events files recorded from real tiny runs, and its bounds on long runs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from backend import series
from backend.contract.event_writer import EventWriter
from backend.contract.events import EventReader, Log, read_all
from backend.series import BUCKETS, ColumnReader, MetricsStore, Series, ema, load_store

FIXTURES = Path(__file__).parent / "fixtures" / "events"
NAMES = ("quickstart-short", "cpu-fp16-overflow", "diverged-lr")


def logs_of(name: str) -> list[dict]:
    return [e for e in read_all(FIXTURES / f"{name}.jsonl") if e["type"] == "log" and e["rank"] == 0]


@pytest.mark.parametrize("name", NAMES)
def test_loss_and_lr_match_the_file(name: str) -> None:
    store = load_store(FIXTURES / f"{name}.jsonl")
    logs = logs_of(name)
    assert store.series["loss"].points() == ([e["step"] for e in logs], [e["loss"] for e in logs])
    finite_grads = [e for e in logs if e["grad_norm"] is not None]
    assert store.series["grad_norm"].points() == ([e["step"] for e in finite_grads],
                                                  [e["grad_norm"] for e in finite_grads])
    assert store.series["learning_rate"].points()[1] == [e["learning_rate"] for e in logs]
    assert store.last_log.loss == logs[-1]["loss"]
    assert store.log_events == len(logs)


def test_eval_loss_checkpoints_and_progress_match_the_file() -> None:
    events = read_all(FIXTURES / "quickstart-short.jsonl")
    store = load_store(FIXTURES / "quickstart-short.jsonl")
    evals = [e for e in events if e["type"] == "eval"]
    assert len(evals) == 4
    assert store.eval_loss.points() == ([e["step"] for e in evals], [e["metrics"]["eval_loss"] for e in evals])
    assert [step for step, _ in store.checkpoints] == [e["step"] for e in events if e["type"] == "checkpoint"]
    end = next(e for e in events if e["type"] == "run_end")
    numbers = store.throughput()
    assert (numbers.step, numbers.max_steps, numbers.fraction) == (end["step"], end["max_steps"], 1.0)
    assert numbers.eta_seconds is None  # the run ended


def test_overflow_markers_and_skipped_steps_of_a_real_fp16_run() -> None:
    logs = logs_of("cpu-fp16-overflow")
    store = load_store(FIXTURES / "cpu-fp16-overflow.jsonl")
    rises = [(e["step"], e["loss_scale"]) for prev, e in itertools.pairwise([{"overflow_count": 0}] + logs)
             if e["overflow_count"] > prev["overflow_count"]]
    assert 8 in [step for step, _ in rises]  # the injected overflow ([debug] inject_overflow_steps = [8])
    assert [(m.step, m.scale, m.count) for m in store.markers] == [(s, scale, 1) for s, scale in rises]
    assert store.overflows.points() == ([s for s, _ in rises], [scale for _, scale in rises])
    assert store.overflow_total == logs[-1]["overflow_count"] == len(rises)
    assert store.skipped_total == logs[-1]["skipped_steps"]
    assert store.series["loss_scale"].points()[1] == [e["loss_scale"] for e in logs]
    assert store.scaler == "GradScaler"
    assert store.grad_norm_lost_at is None  # inf grad norms at skipped steps are the scaler's business


def test_a_run_without_scaler_says_why() -> None:
    begin = read_all(FIXTURES / "quickstart-short.jsonl")[0]
    store = load_store(FIXTURES / "quickstart-short.jsonl")
    assert store.scaler is None and begin["scaler"] is None
    assert store.scaler_reason == begin["scaler_reason"] == "fp32 training: no loss scaling"
    assert len(store.series["loss_scale"]) == 0


def test_a_diverged_run_is_noticed_from_its_grad_norm() -> None:
    logs = logs_of("diverged-lr")
    first_lost = next(e["step"] for e in logs if e["grad_norm"] is None)
    assert load_store(FIXTURES / "diverged-lr.jsonl").grad_norm_lost_at == first_lost == 3


@pytest.mark.parametrize("name", NAMES)
def test_event_path_and_column_path_agree(name: str) -> None:
    from_events = MetricsStore()
    from_events.ingest(EventReader(FIXTURES / f"{name}.jsonl").read_new())
    store = load_store(FIXTURES / f"{name}.jsonl")
    for key in series.SERIES_NAMES:
        assert store.series[key].points() == from_events.series[key].points()
    assert store.loss_smooth.points() == from_events.loss_smooth.points()
    assert store.last_log == from_events.last_log
    assert (store.run_begin, store.run_end, store.overflow_total, store.last_eval, list(store.checkpoints)) == (
        from_events.run_begin, from_events.run_end, from_events.overflow_total, from_events.last_eval,
        list(from_events.checkpoints))


def test_reader_waits_for_a_half_written_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = json.dumps({"v": 1, "type": "log", "time": 1.0, "rank": 0, "step": 1, "loss": 2.5}) + "\n"
    path.write_text(line[:20])
    reader = ColumnReader(path)
    assert reader.read_batch().log_count == 0 and reader.offset == 0
    path.write_text(line + line.replace('"step": 1', '"step": 2')[:10])
    batch = reader.read_batch()
    assert batch.logs["step"].tolist() == [1.0] and reader.offset == len(line)
    with open(path, "w") as handle:
        handle.write(line + line.replace('"step": 1', '"step": 2') + "{not json\n")
    batch = reader.read_batch()
    assert batch.logs["step"].tolist() == [2.0] and reader.bad_lines == 1


def test_other_ranks_are_counted_not_plotted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    for rank in (0, 1):
        EventWriter(path, rank=rank).write("log", step=1, loss=float(rank + 1))
    store = load_store(path)
    assert store.series["loss"].points() == ([1.0], [1.0]) and store.other_ranks == {1}


def test_long_series_stays_bounded_and_keeps_extremes() -> None:
    steps = np.arange(1, 300_001, dtype=float)
    values = 2 + np.sin(steps / 500)
    values[123_457] = 50.0  # one spike
    values[234_567] = -7.0  # one dip
    line = Series()
    for start in range(0, len(steps), 7_000):  # as the reader feeds it, chunk by chunk
        line.extend(steps[start:start + 7_000], values[start:start + 7_000])
    assert len(line._n) == BUCKETS and len(line._tail_x) == series.TAIL_POINTS
    xs, ys = line.points(None, 300)
    assert len(xs) <= 302
    assert (123_458.0, 50.0) in zip(xs, ys, strict=True) and (234_568.0, -7.0) in zip(xs, ys, strict=True)
    assert line.minimum() == (234_568.0, -7.0) and line.maximum() == (123_458.0, 50.0)
    assert xs[-1] == 300_000.0
    zoom_x, zoom_y = line.points(500, 1000)  # the newest steps come raw, every one
    assert zoom_x == steps[-500:].tolist() and zoom_y == values[-500:].tolist()


def test_a_resumed_run_overrides_the_steps_it_repeats() -> None:
    store = MetricsStore()
    first = [Log(step=s, loss=5.0, overflow_count=s // 10) for s in range(1, 31)]
    again = [Log(step=s, loss=1.0, overflow_count=(s - 20) // 10) for s in range(21, 41)]
    store.ingest(first)
    store.ingest(again)
    xs, ys = store.series["loss"].points()
    assert xs == [float(s) for s in range(1, 41)]
    assert ys[:20] == [5.0] * 20 and ys[20:] == [1.0] * 20
    assert store.overflow_total == 3 + 2  # the second process counted from zero again


@pytest.mark.parametrize("weight", [0.0, 0.6, 0.9, 0.999])
def test_vectorised_ema_equals_the_recurrence(weight: float) -> None:
    values = np.random.default_rng(1).random(3000) * 4
    state, expected = 0.0, []
    for value in values:
        state = weight * state + (1 - weight) * value
        expected.append(state)
    got, last = ema(values, weight)
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12) and last == pytest.approx(expected[-1])


def test_damaged_lines_are_counted_and_hide_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = [json.dumps({"v": 1, "type": "log", "time": 1.0, "rank": 0, "step": s, "loss": 10.0 - s})
            for s in range(1, 7)]
    damaged = ['{"v": 1, "type": "log", "step": 3.5, "loss"',  # torn mid-line (a crash while writing)
               "\xff\xfe not even utf-8", "[1, 2, 3]", '{"v": 1, "step": 4.5}']  # no event object, no type
    lines = good[:2] + damaged[:2] + good[2:4] + damaged[2:] + good[4:]
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape").replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe")
                     + b"\n")
    store = load_store(path)
    assert store.bad_lines == 4
    assert store.series["loss"].points() == ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [9.0, 8.0, 7.0, 6.0, 5.0, 4.0])
    assert store.last_log.step == 6 and store.log_events == 6


def test_small_chunks_and_lines_longer_than_a_chunk_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader decodes CHUNK_BYTES at a time and joins them into batches: the seams change nothing."""
    path = FIXTURES / "cpu-fp16-overflow.jsonl"  # its run_begin line is longer than 64 bytes
    whole = load_store(path)
    monkeypatch.setattr(series, "CHUNK_BYTES", 64)
    reader, store, batches = ColumnReader(path), MetricsStore(), 0
    while (batch := reader.read_batch(256)).log_count or batch.others:
        store.ingest_batch(batch)
        batches += 1
    assert batches > 10 and reader.offset == path.stat().st_size
    for key in series.SERIES_NAMES:
        assert store.series[key].points() == whole.series[key].points()
    assert (store.last_log, store.run_begin, store.run_end, store.overflow_total) == (
        whole.last_log, whole.run_begin, whole.run_end, whole.overflow_total)
