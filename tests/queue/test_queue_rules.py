"""The queue's rules without real runs: the sweep grid, the OOM retry's recipe, why an entry waits, the
order commands, a damaged queue file, and the CLI on a held (paused) queue."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.profile import LaunchProfile, load_profile
from backend.queue.admission import why_waiting
from backend.queue.retry import oom_retry_profile
from backend.queue.store import Entry, QueueDamaged, QueueFile, edit, insert_by_priority, move, read_queue
from backend.queue.sweep import SweepError, expand
from tests.runs.helpers import quick_profile

GIB = 1024**3


def _entry(id_: str, state: str = "waiting", priority: int = 0, forecast: int | None = None) -> Entry:
    return Entry(id=id_, name=f"run-{id_}", profile_file="/nowhere.toml", base_dir="/", state=state,
                 priority=priority, forecast_bytes=forecast, run_id=f"R-{id_}" if state == "running" else None)


def test_a_2x2_sweep_expands_into_four_profiles_named_by_their_values() -> None:
    profile = LaunchProfile.model_validate({"name": "lrs", "sweep": {
        "training.learning_rate": [1e-4, 2e-4], "tuner.lora_rank": [4, 8]}})
    runs = expand(profile)
    assert [p.name for p in runs] == ["lrs-lr1e-04-rank4", "lrs-lr1e-04-rank8", "lrs-lr2e-04-rank4",
                                      "lrs-lr2e-04-rank8"]
    assert [(p.training.learning_rate, p.tuner.lora_rank) for p in runs] == [(1e-4, 4), (1e-4, 8), (2e-4, 4),
                                                                             (2e-4, 8)]
    assert all(p.sweep == {} for p in runs)
    assert expand(LaunchProfile(name="plain")) == [LaunchProfile(name="plain")]


def test_a_sweep_key_that_is_no_field_is_refused_by_name() -> None:
    with pytest.raises(SweepError, match="'lerning_rate' is not a profile field"):
        expand(LaunchProfile.model_validate({"sweep": {"training.lerning_rate": [1e-4]}}))
    with pytest.raises(SweepError, match="lora_rank"):
        expand(LaunchProfile.model_validate({"sweep": {"tuner.lora_rank": [0]}}))


def test_the_oom_retry_halves_the_micro_batch_and_doubles_the_accumulation() -> None:
    profile = LaunchProfile.model_validate({"training": {"per_device_train_batch_size": 4,
                                                         "gradient_accumulation_steps": 3}})
    changed = oom_retry_profile(profile, "/r/checkpoint-10")
    assert changed is not None
    retry, note = changed
    assert (retry.training.per_device_train_batch_size, retry.training.gradient_accumulation_steps) == (2, 6)
    assert retry.extra_swift_args["resume_from_checkpoint"] == "/r/checkpoint-10"
    assert note == ("OOM retry: micro-batch 4 -> 2, accumulation 3 -> 6; global batch 12 kept (2 x 6 x 1 "
                    "process(es)); resumes from /r/checkpoint-10 (same global batch: its learning-rate schedule "
                    "goes on)")
    # micro-batch 1: gradient checkpointing instead; already on too: nothing left to try
    one = LaunchProfile.model_validate({"training": {"gradient_checkpointing": False}})
    changed = oom_retry_profile(one, None)
    assert changed is not None and changed[0].training.gradient_checkpointing is True
    assert oom_retry_profile(LaunchProfile(), None) is None


def test_why_each_entry_waits() -> None:
    queue = QueueFile(entries=[_entry("a", "running"), _entry("b", forecast=3 * GIB), _entry("c"),
                               _entry("d", "paused")])
    b, c, d = queue.entries[1:]
    assert why_waiting(queue, b, max_parallel=1, margin=0.0, free_bytes=64 * GIB) == \
        "max_parallel 1 reached (running: R-a)"
    assert why_waiting(queue, c, max_parallel=1, margin=0.0, free_bytes=64 * GIB) == "after run-b (b)"
    assert str(why_waiting(queue, d, max_parallel=1, margin=0.0, free_bytes=64 * GIB)).startswith("paused")
    assert why_waiting(queue, b, max_parallel=2, margin=0.5, free_bytes=4 * GIB) == \
        "host RAM: 4.0 GiB free, needs 4.5 GiB (forecast + margin)"
    assert why_waiting(queue, b, max_parallel=2, margin=0.25, free_bytes=4 * GIB) is None


def test_memory_of_a_run_not_at_its_peak_yet_is_held_for_it() -> None:
    """#34 (low): two entries admitted a second apart against the same free memory. A queued run that has not
    logged a step yet has not taken its memory: its forecast is held back from what is measured free."""
    queue = QueueFile(entries=[_entry("a", "running", forecast=3 * GIB), _entry("b", forecast=3 * GIB)])
    a, b = queue.entries
    assert why_waiting(queue, b, max_parallel=2, margin=0.0, free_bytes=5 * GIB) == (
        "host RAM: 5.0 GiB free, needs 3.0 GiB (forecast + margin); 3.0 GiB of it held for R-a (not at its peak yet)")
    a.peaked = True  # it logged its first step: what is free now is free of it
    assert why_waiting(queue, b, max_parallel=2, margin=0.0, free_bytes=5 * GIB) is None


def test_priority_places_an_entry_and_up_down_move_it() -> None:
    queue = QueueFile(entries=[_entry("a", "running"), _entry("b"), _entry("c")])
    insert_by_priority(queue, _entry("urgent", priority=5))
    assert [e.id for e in queue.entries] == ["a", "urgent", "b", "c"]
    move(queue, queue.find("c"), -1)
    assert [e.id for e in queue.entries] == ["a", "urgent", "c", "b"]
    with pytest.raises(ValueError, match="only waiting or paused entries move"):
        move(queue, queue.find("a"), 1)
    with pytest.raises(ValueError, match="already last"):
        move(queue, queue.find("b"), 1)


def test_a_damaged_queue_file_is_set_aside_never_emptied(tmp_path: Path) -> None:
    (tmp_path / "queue.json").write_text('{"v": 1, "entries": [{"id": "q1"', encoding="utf-8")
    with pytest.raises(QueueDamaged, match="queue.json cannot be read"):
        read_queue(tmp_path)
    with pytest.raises(QueueDamaged, match=r"set aside as .*queue\.json\.damaged-"):
        with edit(tmp_path):
            pass
    aside = list(tmp_path.glob("queue.json.damaged-*"))
    assert len(aside) == 1 and aside[0].read_text(encoding="utf-8") == '{"v": 1, "entries": [{"id": "q1"'
    with edit(tmp_path) as queue:  # the queue starts again beside it
        assert queue.entries == []


def test_the_cli_adds_a_held_sweep_lists_it_and_reorders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    path = quick_profile(tmp_path, sweep={"training.learning_rate": [1e-4, 2e-4]})
    runner = CliRunner()
    result = runner.invoke(full_app(), ["queue", "add", str(path), "--hold"])
    assert result.exit_code == 0, result.output
    assert "keeper: not started" in result.output  # only paused entries: no keeper
    first, second = read_queue(tmp_path / "data" / "queue").entries
    assert (first.name, second.name) == ("quickstart-test-lr1e-04", "quickstart-test-lr2e-04")
    assert load_profile(second.profile_file).training.learning_rate == 2e-4  # the queued copy
    result = runner.invoke(full_app(), ["queue", "down", first.id])
    assert result.exit_code == 0, result.output
    listing = runner.invoke(full_app(), ["queue"]).output
    lines = [line for line in listing.splitlines() if line.strip()[:1].isdigit()]
    assert lines[0].split()[1:4] == [second.id, "quickstart-test-lr2e-04", "paused"]
    assert lines[1].split()[1] == first.id
    result = runner.invoke(full_app(), ["queue", "rm", "qnothere"])
    assert result.exit_code == 2 and "'qnothere' is no queue entry" in result.output
    result = runner.invoke(full_app(), ["queue", "rm", first.id])
    assert result.exit_code == 0
    assert [e.id for e in read_queue(tmp_path / "data" / "queue").entries] == [second.id]
    assert json.loads((tmp_path / "data" / "queue" / "queue.json").read_text())["v"] == 1
    assert not os.path.exists(tmp_path / "data" / "queue" / "keeper.json")


def test_gpus_are_picked_from_recorded_nvml_readings() -> None:
    from backend.queue.admission import pick_gpus

    free = {0: 10 * GIB, 1: 40 * GIB, 2: 31 * GIB, 3: 39 * GIB}  # NVML's free, other processes counted
    assert pick_gpus(free, set(), "auto", 2, 30 * GIB, 0.1) == ([1, 3], None)
    assert pick_gpus(free, {1}, "auto", 2, 30 * GIB, 0.1) == (None, "GPU 2: 31.0 GiB free, needs 33.0 GiB "
                                                                    "(forecast + margin)")
    assert pick_gpus(free, {1}, "1", 1, None, 0.1) == (None, "GPU 1: held by a queued run")
    assert pick_gpus(free, {1}, "1", 1, None, 0.1, shared_ok=True) == ([1], None)
    assert pick_gpus(free, set(), "0", 1, 12 * GIB, 0.0) == (None, "GPU 0: 10.0 GiB free, needs 12.0 GiB "
                                                                   "(forecast + margin)")
    assert pick_gpus(free, set(), "7", 1, None, 0.0)[1] == "GPU 7 is not on this machine (GPUs: 0, 1, 2, 3)"
    assert pick_gpus({0: GIB}, {0}, "auto", 1, None, 0.0) == (None, "1 free GPU(s) needed, 0 not held by a "
                                                                    "queued run")


def test_a_run_is_at_its_peak_once_it_logged_a_step(tmp_path: Path) -> None:
    from backend.queue.keeper import _stepped
    from tests.scoreboard.scoreboard_helpers import fake_run, log

    assert _stepped(fake_run(tmp_path / "a", [], {})) is False  # run_begin at most: still loading
    assert _stepped(fake_run(tmp_path / "b", [log(1, 2.0)], {})) is True
