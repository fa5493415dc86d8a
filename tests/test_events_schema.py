"""The typed events schema: what the callback writes is what every reader decodes; a line that does not
fit is a counted damaged line (never a traceback); a newer format is said, never guessed at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from backend.contract.event_writer import EventWriter, make_event
from backend.contract.events import (
    Checkpoint,
    CudaMemory,
    EventReader,
    Log,
    RunBegin,
    RunEnd,
    read_events,
)
from backend.rundir.layout import RunFolder
from backend.runs.memory_report import measured_peaks
from backend.runs.status import last_log_event
from backend.runs.verdict import read_evidence
from backend.series import load_store
from backend.watch.inbox import last_log
from tests.timing import scaled

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "events"
WRONG_SHAPE = b'{"v":1,"type":"log","time":1.0,"rank":0,"step":41,"max_steps":40,"loss":0.1,"cuda":[1]}\n'
NEWER = b'{"v":2,"type":"log","time":1.0,"rank":0,"step":41,"max_steps":40,"loss":{"mean":0.1}}\n'


def test_every_field_the_callback_writes_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, rank=1)
    gpu = CudaMemory(device=0, allocated=1, reserved=2, max_allocated=3, max_reserved=4)
    writer.write("run_begin", precision="fp16", mixed_precision="fp16", scaler="GradScaler",
                 scaler_reason="fp16 needs dynamic loss scaling", distributed_type="NO", world_size=1,
                 devices=["cuda:0"], trainable_params=10, total_params=100, param_dtype="float16", max_steps=5,
                 start_step=0, rss_bytes=7, output_dir="/out")
    writer.write("log", step=1, max_steps=5, epoch=0.5, loss=None, learning_rate=1e-4, grad_norm=None,
                 token_acc=0.5, nonfinite=["loss"], steps_per_second=2.0, tokens_per_second=100.0, rss_bytes=8,
                 loss_scale=65536.0, overflow_count=1, skipped_steps=1, cuda=[gpu])
    writer.write("eval", step=1, metrics={"eval_loss": 1.5, "eval_runtime": None})
    writer.write("checkpoint", step=1, path="/out/checkpoint-1")
    writer.write("run_end", step=1, max_steps=5, status="finished", runtime_seconds=3.0, peak_rss_bytes=9,
                 cuda_peaks=[gpu], loss_scale=32768.0, overflow_count=1, skipped_steps=1)
    begin, log, evaluation, checkpoint, end = read_events(path)
    assert (begin.scaler, begin.devices, begin.rank, begin.v) == ("GradScaler", ["cuda:0"], 1, 1)
    assert (log.loss, log.nonfinite, log.cuda, log.overflow_count) == (None, ["loss"], [gpu], 1)
    assert evaluation.metrics == {"eval_loss": 1.5, "eval_runtime": None}
    assert checkpoint == Checkpoint(step=1, path="/out/checkpoint-1", time=checkpoint.time, rank=1)
    assert (end.status, end.cuda_peaks, end.peak_rss_bytes) == ("finished", [gpu], 9)


def test_the_writer_refuses_what_the_schema_does_not_have(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="log events have no field lr"):
        make_event("log", 0, lr=1.0)
    with pytest.raises(msgspec.ValidationError):
        make_event("log", 0, cuda=[1])
    with pytest.raises(ValueError, match="unknown event type"):
        make_event("progress", 0)


def test_the_recorded_runs_decode_whole() -> None:
    for name in ("quickstart-short", "cpu-fp16-overflow", "diverged-lr"):
        reader = EventReader(FIXTURES / f"{name}.jsonl")
        events = reader.read_new()
        assert reader.problems() == [] and isinstance(events[0], RunBegin) and isinstance(events[-1], RunEnd)


def test_a_line_without_v_is_version_1_and_other_lines_are_damaged(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"type":"log","step":3}\n' + WRONG_SHAPE + b'{"v":1,"type":"progress"}\n' + b'{"v":"1"}\n')
    reader = EventReader(path)
    assert [e.step for e in reader.read_new()] == [3]
    assert reader.problems() == ["3 damaged lines skipped"]


def _run_with(tmp_path: Path, line: bytes) -> RunFolder:
    """The recorded quickstart run, with `line` appended to its events."""
    folder = tmp_path / "quickstart-short"
    folder.mkdir()
    for suffix, name in ((".jsonl", "events.jsonl"), (".output.log", "output.log"), (".state.json", "state.json"),
                         (".toml", "profile.toml")):
        shutil.copy(FIXTURES / f"quickstart-short{suffix}", folder / name)
    with open(folder / "events.jsonl", "ab") as handle:
        handle.write(line)
    return RunFolder(folder)


def _status(tmp_path: Path, run: RunFolder) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WORKBENCH_DATA_DIR": str(tmp_path / "data"), "WORKBENCH_WORKSPACE": str(tmp_path / "runs"),
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "backend.cli", "status", str(run.path)], capture_output=True,
                          text=True, timeout=scaled(120), cwd=REPO, env=env)


def test_status_of_a_run_with_a_wrong_shaped_event_says_it_and_does_not_traceback(tmp_path: Path) -> None:
    run = _run_with(tmp_path, WRONG_SHAPE)
    shown = _status(tmp_path, run)
    assert "Traceback" not in shown.stderr and shown.returncode == 0, shown.stderr
    assert "step 40/40" in shown.stdout  # the damaged line's step 41 is not taken for the run's
    assert "events: 1 damaged line skipped" in shown.stdout


def test_status_of_a_newer_events_format_says_so_and_guesses_nothing(tmp_path: Path) -> None:
    run = _run_with(tmp_path, NEWER)
    shown = _status(tmp_path, run)
    assert shown.returncode == 0, shown.stderr
    assert "step 40/40" in shown.stdout
    assert "events: events format v2 is newer than this workbench reads (v1)" in shown.stdout


@pytest.mark.parametrize("line", [WRONG_SHAPE, NEWER], ids=["wrong-shape", "newer"])
def test_every_reader_skips_the_line_and_says_it(tmp_path: Path, line: bytes) -> None:
    run = _run_with(tmp_path, line)
    last = last_log_event(run)
    assert isinstance(last, Log) and last.step == 40 and last.loss is not None
    assert last_log(run.path).step == 40  # the status line
    evidence = read_evidence(run.events_path)
    assert evidence.last_step == 40 and evidence.bad_lines == (line == WRONG_SHAPE)
    store = load_store(run.events_path)
    assert store.series["loss"].last[0] == 40
    said = "1 damaged line skipped" if line == WRONG_SHAPE else "events format v2 is newer than this workbench reads (v1)"
    assert store.problems() == [said] and measured_peaks(run)["problems"] == [said]
