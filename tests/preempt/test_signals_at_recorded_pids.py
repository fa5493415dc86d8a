"""Signals at the pids state.json records, on real runs of the tiny model (#34 items 2 and 3): SIGUSR1 to the
recorded trainer pid saves and stops (in the first seconds, before the callback's handler exists, and
mid-run); a run that finished stays finished when its launcher dies at its shutdown, and is never resumed."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.rundir.checkpoint_verdict import judge_checkpoint
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from tests.runs.helpers import log_events, quick_profile, wait_for, workbench

pytestmark = pytest.mark.slow


def _start(home: Path, **training: object) -> RunFolder:
    profile = quick_profile(home, training={"logging_steps": 1, "num_train_epochs": 1000.0, **training})
    result = workbench("run", str(profile), "--detach")
    return find_run(result.stdout.strip().splitlines()[-1])


def _events(run: RunFolder, kind: str) -> list[dict]:
    return [e for e in read_all(run.events_path) if e["type"] == kind and e["rank"] == 0]


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def _is_trainer(pid: int) -> bool:
    line = _cmdline(pid)
    return "swift.cli.sft" in line and "accelerate.commands.launch" not in line


def _launcher_once_training(run: RunFolder) -> psutil.Process:
    """accelerate's launcher, once the trainer it started is there."""
    def find() -> psutil.Process | None:
        processes = run_processes(run.path)
        if not any(_is_trainer(p.pid) for p in processes):
            return None
        return next((p for p in processes if "accelerate.commands.launch" in _cmdline(p.pid)), None)
    found = wait_for(find, timeout=120, what="accelerate's launcher and its trainer")
    assert isinstance(found, psutil.Process)
    return found


def _stopped_on_sigusr1(run: RunFolder) -> None:
    wait_for(lambda: not refresh(run).is_active, timeout=240, what="the run's end")
    state = run.read_state()
    assert (state.status, state.failure_reason) == ("stopped", "saved and stopped on SIGUSR1"), state
    saved = _events(run, "checkpoint")
    assert [e["requested"] for e in saved] == ["SIGUSR1"]
    assert judge_checkpoint(Path(saved[0]["path"])).complete


@pytest.mark.parametrize("which", ["launcher", "trainer"])
def test_sigusr1_to_the_recorded_trainer_pid_in_the_first_seconds_saves_and_stops(
        isolated_runs: Path, tmp_path: Path, tiny_model: Path, which: str) -> None:
    """`kill -USR1 $(jq .trainer_pid state.json)` as soon as it names a process: the launcher (recorded until the
    trainer exists) or the trainer itself, before swift has imported and the callback installed its handler."""
    run = _start(tmp_path, max_steps=100_000, save_steps=100_000)
    if which == "launcher":
        pid = wait_for(lambda: run.read_state().trainer_pid, timeout=60, what="a recorded trainer pid")
    else:
        pid = wait_for(lambda: (s := run.read_state()).trainer_pid != s.launcher_pid and s.trainer_pid,
                       timeout=60, what="the real trainer recorded")
        assert _is_trainer(pid)
    assert _events(run, "run_begin") == []  # the callback has not started: no handler of its own yet
    os.kill(pid, signal.SIGUSR1)
    _stopped_on_sigusr1(run)


def test_sigusr1_to_the_recorded_trainer_pid_mid_run_saves_and_stops(isolated_runs: Path, tmp_path: Path,
                                                                      tiny_model: Path) -> None:
    run = _start(tmp_path, max_steps=100_000, save_steps=100_000)
    wait_for(lambda: any(e["step"] >= 3 for e in log_events(run)), timeout=240, what="step 3")
    state = run.read_state()
    assert state.trainer_pid is not None and _is_trainer(state.trainer_pid)
    assert state.launcher_pid is not None and "accelerate.commands.launch" in _cmdline(state.launcher_pid)
    os.kill(state.trainer_pid, signal.SIGUSR1)
    _stopped_on_sigusr1(run)


def test_a_finished_run_whose_launcher_dies_at_shutdown_stays_finished_and_is_not_resumed(
        isolated_runs: Path, tmp_path: Path, tiny_model: Path) -> None:
    run = _start(tmp_path, max_steps=4, save_steps=2, num_train_epochs=6.0)
    launcher = _launcher_once_training(run)
    launcher.suspend()  # its trainer goes on to its end; the launcher is held in its shutdown
    try:
        wait_for(lambda: [e for e in _events(run, "run_end") if e["status"] == "finished"], timeout=240,
                 what="run_end finished")
        wait_for(lambda: not any(_is_trainer(p.pid) for p in run_processes(run.path)), timeout=60,
                 what="the trainer's exit")
    finally:
        launcher.send_signal(signal.SIGUSR1)  # the late signals: none of them is the training's end
        launcher.kill()
    wait_for(lambda: not refresh(run).is_active, timeout=120, what="the run's recorded end")
    state = run.read_state()
    assert state.status == "finished", state
    assert state.failure_reason == ("finished at step 4 of 4 (run_end, checkpoint-4 complete); the launcher was "
                                    "then killed by SIGKILL during its shutdown")
    checkpoints = [c.name for c in run.checkpoints()]
    assert checkpoints == ["checkpoint-2", "checkpoint-4"]

    refused = workbench("resume", run.run_id, "--detach", check=False)
    assert refused.returncode == 2 and "finished: resuming would train past its end" in " ".join(refused.stderr.split())
    # as an older workbench recorded it: the state says failed, the events say finished
    state_file = run.path / "state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "status": "failed",
                                      "failure_reason": "killed by SIGUSR1", "signal": "SIGUSR1"}))
    refused = workbench("resume", run.run_id, "--detach", check=False)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and (
        f"run {run.run_id} finished (finished at step 4 of 4 (run_end, checkpoint-4 complete), although its state "
        "says failed): resuming would train past its end") in said, refused
    assert [c.name for c in run.checkpoints()] == ["checkpoint-2", "checkpoint-4"]
    assert run.read_state().status == "failed" and run.read_state().attempt == 1


def test_sigusr1_to_the_trainer_s_process_group_with_a_spawned_data_loader_worker_saves_and_stops(
        isolated_runs: Path, tmp_path: Path, tiny_model: Path) -> None:
    """#34 (b): swift's data loader worker started by the `spawn` context runs a fresh interpreter, whose SIGUSR1
    would kill it; `kill -USR1 -- -PGID` of the trainer's group reaches it too. The run saves and stops, and no
    worker dies (no "DataLoader worker ... exited unexpectedly" in the log)."""
    profile = quick_profile(tmp_path, training={"logging_steps": 1, "num_train_epochs": 1000.0, "max_steps": 100_000,
                                                "save_steps": 100_000, "dataloader_num_workers": 1},
                            extra_swift_args={"dataloader_multiprocessing_context": "spawn"})
    run = find_run(workbench("run", str(profile), "--detach").stdout.strip().splitlines()[-1])
    wait_for(lambda: any(e["step"] >= 3 for e in log_events(run)), timeout=240, what="step 3")
    trainer = run.read_state().trainer_pid
    assert trainer is not None and _is_trainer(trainer)
    group = os.getpgid(trainer)
    workers = [p for p in run_processes(run.path) if os.getpgid(p.pid) == group and p.pid != trainer
               and "multiprocessing.spawn" in " ".join(_cmdline(p.pid))]
    assert workers, "no spawned data loader worker in the trainer's process group"
    os.killpg(group, signal.SIGUSR1)
    _stopped_on_sigusr1(run)
    log = (run.path / "output.log").read_text(encoding="utf-8", errors="replace")
    assert "exited unexpectedly" not in log and "killed by signal" not in log
