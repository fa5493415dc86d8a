"""events.summary.npz: a store restored from the summary reads on as if it had read the whole file,
and a summary that does not provably describe the file as it is now is never used (#16)."""

from __future__ import annotations

import io
import json
import math
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backend.series import ColumnReader, MetricsStore, load_store
from backend.series import summary as series_summary
from backend.series.summary import Rejected, Restored, SummaryKeeper, load_run_store, load_summary, summary_path

FIXTURES = Path(__file__).parent / "fixtures" / "events"
NAMES = ("quickstart-short", "cpu-fp16-overflow", "diverged-lr")


def view(store: MetricsStore) -> dict[str, Any]:
    """Everything the monitor and the compare view read from a store."""
    shown: dict[str, Any] = {}
    for name, series in store.all_series().items():
        shown[name] = (series.points(), series.points(last_n=5), series.points(max_points=20),
                       series.minimum(), series.maximum(), series.last, len(series), series.tail_is_complete)
    shown["markers"] = [(m.step, m.scale, m.count) for m in store.markers]
    for name in ("run_begin", "run_end", "last_log", "last_eval", "attempts", "log_events", "bad_lines",
                 "other_ranks", "overflow_total", "skipped_total", "grad_norm_lost_at", "scaler", "scaler_reason"):
        shown[name] = getattr(store, name)
    shown["checkpoints"] = list(store.checkpoints)
    shown["throughput"] = store.throughput()
    return shown


def line_end_near(data: bytes, fraction: float) -> int:
    return data.index(b"\n", int(len(data) * fraction)) + 1


def read_in_two(events: Path, data: bytes, cut: int) -> MetricsStore:
    """The store of a reader that saw the file end at `cut`, then saw the rest appended."""
    events.write_bytes(data[:cut])
    store, reader = MetricsStore(), ColumnReader(events)
    load_store(events, store, reader)
    with open(events, "ab") as handle:
        handle.write(data[cut:])
    return load_store(events, store, reader)


def summarised_at(tmp_path: Path, data: bytes, cut: int) -> Path:
    """A run's events.jsonl whose summary was saved (by the supervisor's keeper) when it ended at `cut`."""
    events = tmp_path / "events.jsonl"
    events.write_bytes(data[:cut])
    SummaryKeeper(events).catch_up(final=True)
    with open(events, "ab") as handle:
        handle.write(data[cut:])
    return events


def long_run_lines(steps: int) -> bytes:
    """A long fp16 run (buckets coarsen, the newest-points ring overflows) with evals, checkpoints,
    overflows, a damaged line, another rank and a resume that goes back 56 steps."""
    lines = [{"v": 1, "type": "run_begin", "time": 0.0, "rank": 0, "precision": "fp16", "scaler": "GradScaler",
              "max_steps": steps}]
    overflows = 0
    for step in range(1, steps + 1):
        if step % 997 == 0:
            overflows += 1
        lines.append({"v": 1, "type": "log", "time": step * 0.5, "rank": 0, "step": step, "max_steps": steps,
                      "loss": 3 + math.sin(step / 300) + (5.0 if step == 4321 else 0.0), "learning_rate": 1e-4,
                      "grad_norm": 1 + (step % 7) / 10, "loss_scale": 2.0 ** (16 - overflows % 3),
                      "overflow_count": overflows, "skipped_steps": overflows})
        if step % 1000 == 0:
            lines.append({"v": 1, "type": "eval", "time": step * 0.5, "rank": 0, "step": step,
                          "metrics": {"eval_loss": 3.5 - step / 10_000}})
            lines.append({"v": 1, "type": "checkpoint", "time": step * 0.5, "rank": 0, "step": step,
                          "path": f"out/checkpoint-{step}"})
            lines.append({"v": 1, "type": "log", "time": step * 0.5, "rank": 1, "step": step, "loss": 9.0})
    # the resumed process counts its overflows from zero again: one more, at step 11,964 (12 x 997)
    resumed = [dict(event, time=event["time"] + 10_000) for event in lines[-60:] if event.get("rank") == 0]
    for event in resumed:
        if event["type"] == "log":
            event["overflow_count"] = event["skipped_steps"] = int(event["step"] >= 11_964)
    text = "".join(json.dumps(event) + "\n" for event in lines[: len(lines) // 2])
    text += '{"v": 1, "type": "log", "ste\n'  # a torn line
    text += "".join(json.dumps(event) + "\n" for event in lines[len(lines) // 2:] + resumed)
    return text.encode()


# ---------------------------------------------------------------- restored == read


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.95])
def test_a_restored_store_reads_on_as_if_it_had_read_the_whole_file(name: str, fraction: float,
                                                                    tmp_path: Path) -> None:
    data = (FIXTURES / f"{name}.jsonl").read_bytes()
    cut = line_end_near(data, fraction)
    (tmp_path / "fast").mkdir()
    events = summarised_at(tmp_path / "fast", data, cut)
    store = MetricsStore()
    assert load_summary(events, store) == Restored(cut)
    restored = load_store(events, store, ColumnReader(events, cut))
    (tmp_path / "slow").mkdir()
    assert view(restored) == view(read_in_two(tmp_path / "slow" / "events.jsonl", data, cut))


def test_a_long_run_restored_mid_way_keeps_its_buckets_ring_extremes_and_counts(tmp_path: Path) -> None:
    data = long_run_lines(12_000)
    cut = line_end_near(data, 0.6)
    (tmp_path / "fast").mkdir()
    restored = load_run_store(summarised_at(tmp_path / "fast", data, cut))
    (tmp_path / "slow").mkdir()
    assert view(restored) == view(read_in_two(tmp_path / "slow" / "events.jsonl", data, cut))
    # and what the file holds, by hand
    assert restored.series["loss"].maximum() == (4321.0, pytest.approx(3 + math.sin(4321 / 300) + 5))
    # every 997th of 12,000 steps, and the one the resumed attempt met again
    assert restored.overflow_total == 13 and restored.skipped_total == 13
    assert restored.other_ranks == {1} and restored.bad_lines == 1
    assert [step for step, _ in restored.checkpoints][-3:] == [11_000, 12_000, 12_000]  # the resume saved again
    assert restored.eval_loss.last == (12_000.0, pytest.approx(2.3))
    # the resumed attempt logged steps 11,944 to 12,000 again (57 logs)
    assert restored.series["loss"].last[0] == 12_000.0 and restored.log_events == 12_000 + 57
    assert not restored.series["loss"].tail_is_complete  # 12,000 points: the ring holds the newest 4,096


# ---------------------------------------------------------------- never used unless provably valid


def rejected(events: Path) -> str:
    """The reason the summary is not used; the store given to load_summary must stay empty."""
    store = MetricsStore()
    found = load_summary(events, store)
    assert isinstance(found, Rejected), found
    assert store.version == 0 and store.log_events == 0 and store.run_begin is None
    return found.reason


@pytest.fixture
def summarised(tmp_path: Path) -> tuple[Path, bytes, int]:
    data = (FIXTURES / "cpu-fp16-overflow.jsonl").read_bytes()
    cut = line_end_near(data, 0.5)
    return summarised_at(tmp_path, data, cut), data, cut


def test_no_summary_is_said_as_such(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_bytes(b"")
    assert rejected(tmp_path / "events.jsonl") == "none"


def test_a_replaced_events_file_is_not_summarised(summarised: tuple[Path, bytes, int]) -> None:
    events, data, _cut = summarised
    events.rename(events.with_name("old.jsonl"))
    events.write_bytes(data)  # the same bytes, another file
    assert rejected(events) == "events.jsonl was replaced since"


def test_a_truncated_events_file_is_not_summarised(summarised: tuple[Path, bytes, int]) -> None:
    events, data, cut = summarised
    with open(events, "r+b") as handle:
        handle.truncate(cut - 10)
    assert rejected(events) == "events.jsonl is shorter than when it was summarised"


@pytest.mark.parametrize("where", ["start", "before the offset"])
def test_a_rewritten_events_file_is_not_summarised(tmp_path: Path, where: str) -> None:
    data = long_run_lines(2_000)  # ~500 KB: its start and the part before the offset are hashed apart
    cut = line_end_near(data, 0.8)
    events = summarised_at(tmp_path, data, cut)
    position = data.index(b'"loss"') + 10 if where == "start" else data.rindex(b'"loss"', 0, cut) + 10
    with open(events, "r+b") as handle:  # same file, same size, one digit changed
        handle.seek(position)
        digit = handle.read(1)
        handle.seek(position)
        handle.write(b"7" if digit != b"7" else b"3")
    assert rejected(events) == "events.jsonl was rewritten since"
    assert view(load_run_store(events)) == view(load_store(events))  # the file's truth


def test_a_summary_of_other_store_code_is_not_used(summarised: tuple[Path, bytes, int],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(series_summary, "store_code", lambda: "0123456789abcdef")
    assert rejected(summarised[0]) == "made by another version of the workbench"


def test_damaged_summaries_are_rejected_and_the_file_read_whole(summarised: tuple[Path, bytes, int]) -> None:
    events, _data, _cut = summarised
    path, whole = summary_path(events), view(load_store(events))
    good = path.read_bytes()
    damages = {
        "torn": good[: len(good) // 2],
        "not a zip": b"\x00" * 400,
        "a pickled object": _npz(meta=np.array([{"offset": 0}], dtype=object)),
        "an array of the wrong shape": _with_array(good, "loss.n", np.zeros(7, dtype=np.int64)),
    }
    for what, content in damages.items():
        path.write_bytes(content)
        assert rejected(events).startswith("damaged summary: "), what
        assert view(load_run_store(events)) == whole, what


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _with_array(npz: bytes, name: str, values: np.ndarray) -> bytes:
    with np.load(io.BytesIO(npz)) as saved:
        arrays = {key: saved[key] for key in saved.files}
    arrays[name] = values
    return _npz(**arrays)


def test_a_summary_is_a_zip_of_arrays_only(summarised: tuple[Path, bytes, int]) -> None:
    with zipfile.ZipFile(summary_path(summarised[0])) as archive:
        assert all(name.endswith(".npy") for name in archive.namelist())
    with np.load(summary_path(summarised[0]), allow_pickle=False) as saved:
        assert all(saved[name].dtype != object for name in saved.files)


# ---------------------------------------------------------------- the keeper


def test_the_keeper_saves_every_so_many_bytes_and_at_the_end_at_a_line_end(tmp_path: Path) -> None:
    data = long_run_lines(3_000)
    events = tmp_path / "events.jsonl"
    cut = len(data) - 40  # the last line half-written
    events.write_bytes(data[:cut])
    keeper = SummaryKeeper(events, every_bytes=len(data) // 3)
    keeper.catch_up()
    store = MetricsStore()
    offset = load_summary(events, store)
    assert isinstance(offset, Restored) and len(data) // 3 <= offset.offset < cut and data[offset.offset - 1] == 10
    keeper.catch_up(final=True)
    last_line_start = data.rindex(b"\n", 0, cut) + 1
    assert load_summary(events, MetricsStore()) == Restored(last_line_start)
    with open(events, "ab") as handle:
        handle.write(data[cut:])
    assert view(load_run_store(events)) == view(read_in_two(tmp_path / "slow.jsonl", data, last_line_start))


def test_a_new_keeper_goes_on_from_the_summary(summarised: tuple[Path, bytes, int]) -> None:
    """A resumed run's supervisor starts from the summary its predecessor left."""
    events, data, cut = summarised
    keeper = SummaryKeeper(events)
    assert keeper.reader.offset == cut and keeper.store.log_events > 0
    keeper.catch_up(final=True)
    assert load_summary(events, MetricsStore()) == Restored(len(data))
    assert os.stat(summary_path(events)).st_mode & 0o777 == 0o644


def test_a_real_runs_supervisor_leaves_the_summary_of_its_whole_file(short_lora_run) -> None:  # type: ignore[no-untyped-def]
    """The shared real run (4 LoRA steps, a real supervisor): once the supervisor is done, the summary
    holds every byte of events.jsonl, and restores to what reading the file gives."""
    events = short_lora_run.events_path
    deadline = time.monotonic() + 60
    while not isinstance(found := load_summary(events, store := MetricsStore()), Restored) or (
            found.offset != events.stat().st_size):
        assert time.monotonic() < deadline, f"no summary of the whole events file: {found}"
        time.sleep(0.2)
    restored, whole = view(store), view(load_store(events))
    # the rate is averaged over the reads' newest logs: the keeper read the run as it went, once every 15 s
    for numbers in (restored.pop("throughput"), whole.pop("throughput")):
        assert (numbers.step, numbers.max_steps, numbers.fraction) == (4, 4, 1.0)
    assert restored == whole
    # the quickstart logs its first step and every 5th: one log, then the eval and checkpoint of step 4
    assert restored["log_events"] == 1 and [step for step, _ in restored["checkpoints"]] == [4]
    assert restored["run_end"].status == "finished"


# ---------------------------------------------------------------- crafted summaries (#29 Medium 7)


def _crafted(good: bytes, events: Path, change_meta: Any = None, **extra: np.ndarray) -> bytes:
    """The good summary with its meta changed and members added, its fingerprint made to pass again
    (whoever can write the run folder can compute it)."""
    with np.load(io.BytesIO(good)) as saved:
        arrays = {key: saved[key] for key in saved.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    if change_meta is not None:
        change_meta(meta)
        meta.update(series_summary._fingerprint(events, meta["offset"]))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays, **extra)
    return buffer.getvalue()


def _set(path: str, value: Any) -> Any:
    def change(meta: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            meta = meta[key]
        meta[last] = value
    return change


CRAFTED = {
    "last_log = [1, 2, 3]": (_set("store.last_log", [1, 2, 3]), "meta: Expected `object | null`, got `array`"),
    "offset -1": (_set("offset", -1), "meta: Expected `int` >= 0 - at `$.offset`"),
    "a count as a string": (_set("store.log_events", "12"), "meta: Expected `int`, got `str`"),
    "a negative count": (_set("store.bad_lines", -5), "meta: Expected `int` >= 0"),
    "a billion buckets": (_set("store.series.loss.buckets", 10**9), "meta: series 'loss' sized (1000000000, 4096)"),
    "a field of its own": (_set("store.drawn", True), "meta: Object contains unknown field `drawn`"),
}


@pytest.mark.parametrize("what", sorted(CRAFTED))
def test_a_crafted_summary_is_damaged_and_the_file_read_whole(what: str,
                                                             summarised: tuple[Path, bytes, int]) -> None:
    events, _data, _cut = summarised
    path, whole = summary_path(events), view(load_store(events))
    change, why = CRAFTED[what]
    path.write_bytes(_crafted(path.read_bytes(), events, change))
    assert rejected(events).startswith(f"damaged summary: {why}")
    assert view(load_run_store(events)) == whole


def test_a_summary_with_a_member_it_never_writes_is_damaged(summarised: tuple[Path, bytes, int]) -> None:
    events, _data, _cut = summarised
    path = summary_path(events)
    path.write_bytes(_crafted(path.read_bytes(), events, junk=np.zeros(10)))
    assert rejected(events) == "damaged summary: unknown member 'junk.npy'"
    assert load_run_store(events).problems() == [  # what the monitor's loss line shows
        "damaged summary: unknown member 'junk.npy' (the whole events file is read instead)"]


def test_a_huge_member_is_refused_before_it_is_decompressed(summarised: tuple[Path, bytes, int]) -> None:
    import tracemalloc
    events, _data, _cut = summarised
    path = summary_path(events)
    with np.load(io.BytesIO(path.read_bytes())) as saved:
        arrays = {key: saved[key] for key in saved.files}
    arrays["loss.tail_x"] = np.zeros(8 << 20)  # 64 MiB of zeros: a file of ~70 KB
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    path.write_bytes(buffer.getvalue())
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    try:
        reason = rejected(events)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reason == "damaged summary: member 'loss.tail_x.npy' holds 67,108,992 bytes (at most 36,864)"
    assert peak < 8 << 20
