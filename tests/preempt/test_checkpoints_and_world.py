"""Verified checkpoints and resume guards (#27), on copies of a real checkpoint and hand-made world
records: no training of their own (short_lora_run is the session's shared one)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from backend.contract.save_request import read_save_request, take_save_request, write_save_request
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.rundir.checkpoint_verdict import choose_resume_checkpoint, judge_checkpoint
from backend.rundir.layout import RunFolder
from backend.rundir.world import World, WorldRecord, file_sha256, world_differences
from backend.runs.stop import stop_run
from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def _copy_real(short_lora_run: RunFolder, run: RunFolder, step: int) -> Path:
    return _copy_as(short_lora_run.checkpoints()[-1], run.path / "output" / f"checkpoint-{step}")


def _copy_as(real: Path, target: Path) -> Path:
    """A copy of a real checkpoint as the one of another step: its trainer_state.json says that step (#34)."""
    shutil.copytree(real, target)
    state = json.loads((target / "trainer_state.json").read_text())
    (target / "trainer_state.json").write_text(json.dumps({**state, "global_step": int(target.name.split("-")[1])}))
    return target


def test_a_real_checkpoint_is_complete_and_one_without_optimizer_is_named(short_lora_run: RunFolder,
                                                                          tmp_path: Path) -> None:
    real = short_lora_run.checkpoints()[-1]
    assert real.name == "checkpoint-4"
    assert judge_checkpoint(real).missing == ()
    cut = _copy_as(real, tmp_path / "checkpoint-8")
    (cut / "optimizer.pt").unlink()
    (cut / "scheduler.pt").write_bytes(b"")  # a full disk leaves an empty file
    assert judge_checkpoint(cut).problem == ("checkpoint-8 lacks optimizer.pt (optimizer state), scheduler.pt "
                                             "(learning-rate schedule)")
    choice = choose_resume_checkpoint([tmp_path / "checkpoint-2", real, cut])
    assert choice.checkpoint == real
    assert choice.lines() == ["skipped checkpoint-8 lacks optimizer.pt (optimizer state), scheduler.pt "
                              "(learning-rate schedule)"]


def test_the_rng_state_of_every_rank_is_needed(short_lora_run: RunFolder, tmp_path: Path) -> None:
    two = _copy_as(short_lora_run.checkpoints()[-1], tmp_path / "checkpoint-6")
    (two / "rng_state.pth").rename(two / "rng_state_0.pth")
    assert judge_checkpoint(two, world_size=2).problem == "checkpoint-6 lacks rng_state_1.pth (RNG state of rank 1 of 2)"
    shutil.copy(two / "rng_state_0.pth", two / "rng_state_1.pth")
    assert judge_checkpoint(two, world_size=2).complete
    (two / "rng_state_0.pth").unlink()  # world size unknown: the ranks found must run from 0
    assert judge_checkpoint(two).problem == "checkpoint-6 lacks rng_state_0.pth (RNG state of a rank between 0 and 1)"


def test_resume_skips_the_checkpoint_without_optimizer_and_says_why(short_lora_run: RunFolder,
                                                                    workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped")
    _copy_real(short_lora_run, run, 4)
    (_copy_real(short_lora_run, run, 8) / "optimizer.pt").unlink()
    try:
        result = h.cli("resume", run.run_id, "--detach")
        h.assert_clean_exit(result, (0,))
        assert "skipped checkpoint-8 lacks optimizer.pt (optimizer state)" in result.output
        assert f"from {run.path / 'output' / 'checkpoint-4'}" in result.output
        assert run.read_state().resumed_from == str(run.path / "output" / "checkpoint-4")
        assert "workbench: skipped checkpoint-8 lacks optimizer.pt (optimizer state)" in run.log_path.read_text()
    finally:
        stop_run(run)


def _world_run(workspace: Path, short_lora_run: RunFolder, nproc_now: int, data: Path | None = None) -> RunFolder:
    """A stopped run launched as one process (world.json by hand) whose profile.toml now asks for `nproc_now`."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", *(["--dataset", str(data)] if data else [])]
    run = h.fake_run(workspace, status="stopped", argv=argv)  # the command names the data it reads (#34)
    _copy_real(short_lora_run, run, 4)
    profile = (SHIPPED_PROFILES_DIR / "quickstart.toml").read_text()
    if nproc_now != 1:
        profile += f'\n[distribution]\nstrategy = "ddp"\ndevice = "cpu"\nnproc_per_node = {nproc_now}\n'
    run.profile_path.write_text(profile)
    loaded = WorldRecord.model_validate({"world": {"nnodes": 1, "nproc_per_node": 1, "micro_batch": 1,
                                                   "gradient_accumulation_steps": 1},
                                         "hashes": {str(data): file_sha256(data)} if data else {},
                                         "base_dir": str(SHIPPED_PROFILES_DIR)})
    run.world_path.write_text(loaded.model_dump_json())
    return run


def test_world_differences_are_said_field_by_field() -> None:
    then = World(nnodes=1, nproc_per_node=1, micro_batch=1, gradient_accumulation_steps=1)
    now = World(nnodes=2, nproc_per_node=4, micro_batch=1, gradient_accumulation_steps=1)
    assert world_differences(then, now) == ["machines (nnodes): 1 at launch, 2 now",
                                            "processes per machine (nproc_per_node): 1 at launch, 4 now"]
    assert world_differences(then, then) == []


def test_a_resume_in_another_world_is_refused_with_the_difference(short_lora_run: RunFolder,
                                                                  workspace: Path) -> None:
    run = _world_run(workspace, short_lora_run, nproc_now=2)
    command_before = run.command_path.read_text()
    result = h.cli("resume", run.run_id, "--detach")
    h.assert_clean_exit(result, (1, 2))
    assert "the world differs from the checkpoint's: processes per machine (nproc_per_node): 1 at launch, 2 now" \
        in " ".join(result.output.split())
    assert "--allow-world-change" in result.output
    assert run.read_state().status == "stopped" and run.command_path.read_text() == command_before


def test_allow_world_change_goes_and_says_what_changes(short_lora_run: RunFolder, workspace: Path,
                                                       tiny_model: Path) -> None:
    run = _world_run(workspace, short_lora_run, nproc_now=2)
    command = json.loads(run.command_path.read_text())
    command["argv"] += ["--model", str(tiny_model)]
    run.command_path.write_text(json.dumps(command))
    try:
        result = h.cli("resume", run.run_id, "--detach", "--allow-world-change")
        h.assert_clean_exit(result, (0,))
        said = " ".join(result.output.split())
        assert "world changed (allowed): processes per machine (nproc_per_node): 1 at launch, 2 now" in said
        assert "global batch: 1 machine(s) x 1 process(es) x micro batch 1 x accumulation 1 = 1 -> 1 machine(s) x " \
               "2 process(es) x micro batch 1 x accumulation 1 = 2" in said
        assert "steps per epoch: times 1/2" in said and "data order: the sampler splits the data over 2" in said
        argv = run.read_command()["argv"]
        assert argv[-2:] == ["--resume_from_checkpoint", str(run.path / "output" / "checkpoint-4")]
        assert "num_processes: 2" in (run.path / "accelerate_config.yaml").read_text()
        assert json.loads(run.world_path.read_text())["world"]["nproc_per_node"] == 2
    finally:
        stop_run(run)


def test_a_changed_dataset_file_is_a_warning_naming_it(short_lora_run: RunFolder, workspace: Path,
                                                       tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": []}\n')
    run = _world_run(workspace, short_lora_run, nproc_now=1, data=data)
    data.write_text('{"messages": []}\n{"messages": []}\n')
    try:
        result = h.cli("resume", run.run_id, "--detach")
        h.assert_clean_exit(result, (0,))
        assert f"warning: dataset file {data} changed since launch" in " ".join(result.output.split())
    finally:
        stop_run(run)


def test_save_requests_a_stop_is_never_weakened(tmp_path: Path) -> None:
    assert take_save_request(tmp_path) is None
    write_save_request(tmp_path, "stop", "SIGUSR1")
    write_save_request(tmp_path, "save")
    pending = read_save_request(tmp_path)
    assert pending is not None and (pending.action, pending.reason) == ("stop", "SIGUSR1")
    taken = take_save_request(tmp_path)
    assert taken is not None and taken.action == "stop"
    assert take_save_request(tmp_path) is None and not (tmp_path / "save.request").exists()


def test_save_on_a_run_that_is_not_running_says_so(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped")
    result = h.cli("save", run.run_id)
    h.assert_clean_exit(result, (1, 2))
    assert "is stopped: only a running run can save a checkpoint now" in " ".join(result.output.split())
    assert not (run.path / "save.request").exists()


@pytest.mark.parametrize(("profile", "taken"), [('name = "fake"\n[run]\nsave_on_term = true\n', True),
                                                ('name = "fake"\n', False)])
def test_the_supervisor_turns_sigterm_into_save_and_stop_only_with_save_on_term(workspace: Path, profile: str,
                                                                                 taken: bool) -> None:
    import signal

    from backend.runs.supervise import RunKept

    run = h.fake_run(workspace, status="running")
    run.profile_path.write_text(profile)
    kept = RunKept(run)
    assert kept.intercept_signal(signal.SIGTERM) is taken
    pending = read_save_request(run.path)
    assert (None if pending is None else (pending.action, pending.reason)) == (("stop", "SIGTERM") if taken else None)
    assert kept.intercept_signal(signal.SIGUSR1) is True  # SIGUSR1: always
    pending = read_save_request(run.path)
    assert pending is not None and (pending.action, pending.reason) == ("stop", "SIGUSR1")
