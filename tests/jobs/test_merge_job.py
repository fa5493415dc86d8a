"""Merging LoRA checkpoints with real `swift export` jobs on the tiny model."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.checkpoints.merged import merged_models
from backend.checkpoints.targets import MODEL_RECORD, resolve_target
from backend.core.process_identity import job_marker
from backend.inference.batch import InferSettings, start_infer
from backend.jobs.job import JobFolder, list_jobs, refresh_job, stop_job
from backend.merge.job import MergeRefused, default_target, plan_merge, start_merge
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import finish, results, train_quickstart
from tests.shared_runs import private_copy
from tests.timing import scaled

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quill_run(quill_run: RunFolder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunFolder]:
    """This module's copy of the session's quickstart: its merges and jobs write into the run folder."""
    with private_copy(quill_run, tmp_path_factory.mktemp("merge-home")) as copy:
        yield copy


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _hidden_leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def merged_318(quill_run: RunFolder) -> Path:
    """checkpoint-318 merged into the default target, once for this module."""
    job = start_merge(quill_run, 318)
    state = finish(job)
    print(f"merge of checkpoint-318: {state.seconds:.1f} s")
    return default_target(quill_run, quill_run.checkpoints()[-1])


def test_merged_model_generates_exactly_what_base_plus_adapter_generates(quill_run: RunFolder,
                                                                         merged_318: Path) -> None:
    assert (merged_318 / "config.json").is_file() and (merged_318 / "model.safetensors").is_file()
    record = json.loads((merged_318 / MODEL_RECORD).read_text())
    assert record["step"] == 318 and record["model_type"] == "qwen2" and record["template"] == "qwen"
    base = Path(record["base_model"])
    # the merge really changed the weights (otherwise equal generations would prove nothing)
    assert _digest(merged_318)["model.safetensors"] != _digest(base)["model.safetensors"]

    # greedy answers to the same prompts: base + adapter (LoRA applied at run time) vs the merged folder
    settings = InferSettings(max_new_tokens=32, temperature=0.0, limit=6)
    with_adapter = start_infer(quill_run, dataset=["builtin:self-cognition"], checkpoint=318, settings=settings)
    merged = start_infer(quill_run, dataset=["builtin:self-cognition"], merged=True, settings=settings)
    assert "--adapters" in with_adapter.read_spec().argv and "--adapters" not in merged.read_spec().argv
    assert str(merged_318) in merged.read_spec().argv
    finish(with_adapter)
    finish(merged)
    adapter_rows, merged_rows = results(with_adapter.read_spec().output), results(merged.read_spec().output)
    assert len(adapter_rows) == len(merged_rows) == 6
    for a, m in zip(adapter_rows, merged_rows, strict=True):
        assert a["prompt"] == m["prompt"]
        assert a["tokens"], f"no tokens generated for {a['prompt']!r}"
        assert a["tokens"] == m["tokens"], f"generations differ for {a['prompt']!r}: {a['answer']!r} vs {m['answer']!r}"


def test_merged_model_is_listed_and_chat_able(quill_run: RunFolder, merged_318: Path) -> None:
    listed = [m for m in merged_models([quill_run.path]) if m.path == merged_318]
    assert len(listed) == 1 and listed[0].step == 318 and listed[0].run_id == quill_run.run_id
    assert merged_318 in [m.path for m in merged_models()]  # found from the run index as well
    by_run = resolve_target(quill_run.run_id, merged=True)
    by_folder = resolve_target(str(merged_318))
    assert by_run.model == by_folder.model == str(merged_318) and by_run.adapters == ()
    assert (by_folder.model_type, by_folder.template) == ("qwen2", "qwen")
    assert by_folder.base() is not None and by_folder.base().model == listed[0].base_model


def test_merging_twice_is_refused_and_leaves_the_first_intact(quill_run: RunFolder, merged_318: Path) -> None:
    before = _digest(merged_318)
    jobs_before = len(list_jobs(quill_run.jobs_dir))
    with pytest.raises(MergeRefused, match="already exists.*--replace"):
        start_merge(quill_run, 318)
    # the CLI says the same, with exit code 2, and starts nothing
    cli = subprocess.run([sys.executable, "-m", "backend.cli", "merge", quill_run.run_id, "--checkpoint", "318"],
                         capture_output=True, text=True, timeout=scaled(120))
    assert cli.returncode == 2 and "already exists" in cli.stderr and "--replace" in cli.stderr
    assert _digest(merged_318) == before
    assert len(list_jobs(quill_run.jobs_dir)) == jobs_before


def test_replace_rebuilds_the_folder_through_a_temporary_one(quill_run: RunFolder, tmp_path: Path) -> None:
    target = tmp_path / "mine"
    finish(start_merge(quill_run, 200, output=target))
    first = json.loads((target / MODEL_RECORD).read_text())
    plan = plan_merge(quill_run, 300, output=target, replace=True)
    assert plan.temp_dir.parent == target.parent and plan.temp_dir.name.startswith(".")
    assert any("replaces the existing" in note for note in plan.notes)
    finish(start_merge(quill_run, 300, output=target, replace=True))
    second = json.loads((target / MODEL_RECORD).read_text())
    assert (first["step"], second["step"]) == (200, 300)
    assert _hidden_leftovers(tmp_path) == []


def test_merge_of_a_missing_checkpoint_names_the_ones_there(quill_run: RunFolder) -> None:
    with pytest.raises(MergeRefused, match=r"no checkpoint-7; it has: 200, 300, 318"):
        plan_merge(quill_run, 7)


def test_qlora_merge_writes_one_full_precision_model(tiny_model: Path, tmp_path: Path) -> None:
    run = train_quickstart(tmp_path / "runs", tuner={"type": "qlora", "quant_method": "bnb"},
                           training={"max_steps": 4, "save_steps": 4})
    checkpoint = run.checkpoints()[-1]
    plan = plan_merge(run)
    said = " ".join(plan.notes)
    assert "QLoRA" in said and "not 4-bit" in said and "float32" in said
    assert plan.record["quantization"] == "bnb-int4"
    finish(start_merge(run))
    config = json.loads((plan.target / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float model, loadable anywhere
    assert not (checkpoint.parent / f"{checkpoint.name}-merged").exists()  # nothing written beside the checkpoint
    assert resolve_target(run.run_id, merged=True).model == str(plan.target)


def _exporters(job: JobFolder) -> list[psutil.Process]:
    return [p for p in job_marker(job.path).processes() if "swift.cli.export" in " ".join(p.cmdline())]


def _signal_pending(proc: psutil.Process, sig: signal.Signals) -> bool:
    """`sig` waits for `proc` (stopped, it cannot take it yet): /proc's pending masks, bit sig - 1."""
    status = Path(f"/proc/{proc.pid}/status").read_text()
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask >> (sig - 1) & 1 for mask in masks)


def _partial_with_files(folder: Path) -> Path | None:
    for partial in folder.glob(".stopped.partial-*"):
        try:
            if any(partial.iterdir()):
                return partial
        except OSError:  # not a folder yet, or gone
            continue
    return None


def test_a_stopped_merge_leaves_no_half_written_model(quill_run: RunFolder, tmp_path: Path) -> None:
    """Stopped while swift is writing the merged model into its temporary folder: no target, no temporary
    folder, no process left. swift is frozen (SIGSTOP) the moment the folder has files, so the stop lands
    mid-write on any machine; it runs on once the stop's SIGTERM is pending for it."""
    target = tmp_path / "stopped"
    job = start_merge(quill_run, 200, output=target)
    partial = None
    while partial is None:
        assert refresh_job(job).is_active, f"the merge ended before it wrote anything:\n{job.log_tail(3000)}"
        partial = _partial_with_files(tmp_path)
        time.sleep(0.005)
    exporters = _exporters(job)
    for proc in exporters:
        proc.suspend()
    written = sorted(p.name for p in partial.iterdir())
    assert exporters and written and not target.exists()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stopping = pool.submit(stop_job, job)
        deadline = time.monotonic() + 30
        while not all(_signal_pending(p, signal.SIGTERM) for p in exporters) and time.monotonic() < deadline:
            time.sleep(0.02)
        for proc in exporters:
            proc.resume()
        state = stopping.result(timeout=scaled(60))

    assert state.status == "stopped" and state.stop_requested, (state, written)
    assert not target.exists() and not partial.exists() and _hidden_leftovers(tmp_path) == []
    assert job_marker(job.path).processes() == [] and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                                              for p in exporters)
    assert job.progress().label == "stopped"
