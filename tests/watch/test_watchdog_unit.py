"""The watchdog over a hand-made run folder: events in, alerts out; the heartbeat keeps a long
evaluation from passing for a hang; a `stop` action is taken once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from backend.contract.alerts import read_alerts
from backend.contract.heartbeat import heartbeat_path
from backend.rundir.layout import RunFolder
from backend.watch.config import WatchSection
from backend.watch.watchdog import Watchdog


def _events(folder: Path, *events: dict) -> None:
    with open(folder / "events.jsonl", "a") as handle:
        for event in events:
            handle.write(json.dumps({"v": 1, "rank": 0, "time": 0.0, **event}) + "\n")


def test_heartbeat_postpones_the_hang_and_silence_raises_it(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    dog = Watchdog(run, None, WatchSection(hang_factor=2.0, hang_min_seconds=5.0, actions={"hang": "alert"}))
    t0 = time.time()
    _events(tmp_path, {"type": "run_begin", "scaler": None}, {"type": "log", "step": 1, "loss": 2.0, "nonfinite": []})
    dog.poll(t0 - 20, ticks=False)
    heartbeat_path(tmp_path).touch()  # an evaluation batch just now: alive
    assert dog._hang(t0) == []
    found = dog._hang(t0 + 30)  # then 30 s without a step, a log record or a heartbeat
    assert [(f.kind, f.step) for f in found] == [("hang", 1)]


def test_nonfinite_alert_written_once_with_its_step(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    dog = Watchdog(run, None, WatchSection())
    _events(tmp_path, {"type": "run_begin", "scaler": None},
            {"type": "log", "step": 1, "loss": 2.0, "nonfinite": []},
            {"type": "log", "step": 2, "loss": 2.1, "grad_norm": None, "nonfinite": ["grad_norm"]},
            {"type": "log", "step": 3, "loss": 2.2, "grad_norm": None, "nonfinite": ["grad_norm"]})
    dog.poll(time.time(), ticks=False)
    alerts = read_alerts(tmp_path)
    assert [(a.kind, a.step, a.message) for a in alerts] == [
        ("nonfinite", 2, "grad_norm became NaN/inf at step 2 (rank 0)")]
    assert alerts[0].run_id == tmp_path.name and alerts[0].action == "alert"


def test_off_drops_a_kind(tmp_path: Path) -> None:
    dog = Watchdog(RunFolder(tmp_path), None, WatchSection(actions={"nonfinite": "off"}))
    _events(tmp_path, {"type": "log", "step": 2, "loss": None, "nonfinite": ["loss"]})
    dog.poll(time.time(), ticks=False)
    assert read_alerts(tmp_path) == []


def test_next_checkpoint_forecast(tmp_path: Path) -> None:
    from backend.contract.events import RunBegin
    from backend.watch.probes import checkpoint_forecast

    begin = RunBegin(trainable_params=1000, total_params=100_000, world_size=2, param_dtype="bfloat16")
    # adapter in fp32 + AdamW's two fp32 states + rng states per rank + 1 MB of configs
    assert checkpoint_forecast([], begin) == (4000 + 8000 + 2 * 16_384 + 1_000_000,
                                              "adapter + AdamW states, from the parameter counts")
    full = RunBegin(trainable_params=1000, total_params=1000, world_size=1, param_dtype="bfloat16")
    assert checkpoint_forecast([], full) == (2000 + 8000 + 16_384 + 1_000_000,
                                             "full weights + AdamW states, from the parameter counts")
    cut = tmp_path / "checkpoint-20"  # cut short by a stop: no trainer_state.json, not a basis
    cut.mkdir()
    done = tmp_path / "checkpoint-10"
    (done / "sub").mkdir(parents=True)
    (done / "trainer_state.json").write_text("x" * 100)
    (done / "sub" / "optimizer.pt").write_bytes(b"\0" * 5000)
    assert checkpoint_forecast([done, cut], begin) == (5100, "size of checkpoint-10")
    assert checkpoint_forecast([], None) == (None, "nothing known yet")
