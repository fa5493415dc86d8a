"""Save on demand and on signal, on one real run of the tiny model (#27), in order: `workbench save`
mid-run makes a checkpoint at the next step and training goes on; SIGUSR1 to the trainer saves and
stops with the reason; the resume carries the step count on; SIGUSR1 to the resumed run's supervisor
saves and stops it too."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.rundir.checkpoint_verdict import judge_checkpoint
from backend.rundir.layout import RunFolder, RunState
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from tests.runs.helpers import log_events, quick_profile, wait_for, workbench

pytestmark = pytest.mark.slow
SAVED = re.compile(r"saved (\S+/checkpoint-(\d+)) at step (\d+) \(save now\)")


def _trainer(run: RunFolder) -> psutil.Process:
    """The training process itself (swift.cli.sft), not its accelerate launcher."""
    def find() -> psutil.Process | None:
        for proc in run_processes(run.path):
            try:
                line = proc.cmdline()
            except psutil.Error:
                continue
            if "swift.cli.sft" in line and "accelerate.commands.launch" not in line:
                return proc
        return None
    found = wait_for(find, timeout=60, what="the trainer process")
    assert isinstance(found, psutil.Process)
    return found


def _checkpoints(run: RunFolder) -> list[dict]:
    return [e for e in read_all(run.events_path) if e["type"] == "checkpoint" and e["rank"] == 0]


@pytest.fixture(scope="module")
def long_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A quickstart run that would train 100,000 steps (saving never by schedule), one event per step."""
    home = tmp_path_factory.mktemp("preempt")
    old = {k: os.environ.get(k) for k in ("WORKBENCH_DATA_DIR", "WORKBENCH_WORKSPACE")}
    os.environ["WORKBENCH_DATA_DIR"] = str(home / "data")
    os.environ["WORKBENCH_WORKSPACE"] = str(home / "runs")
    profile = quick_profile(home, training={"max_steps": 100_000, "save_steps": 100_000, "logging_steps": 1,
                                            "num_train_epochs": 1000.0})
    result = workbench("run", str(profile), "--detach")
    run = find_run(result.stdout.strip().splitlines()[-1])
    try:
        yield run
    finally:
        from backend.rundir.process import signal_processes

        signal_processes(run_processes(run.path), signal.SIGKILL)
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# The run's stages are module fixtures, each asking for the one before it: a test run alone (-k) or in
# another order finds the run in the stage it checks (the save, then SIGUSR1, then the resume).
@dataclass(frozen=True)
class SaveNow:
    said: str  # what `workbench save` printed
    status_after: str  # the run's status once a few more steps were logged
    request_left: bool  # save.request still in the run folder


@pytest.fixture(scope="module")
def save_now(long_run: RunFolder) -> SaveNow:
    """`workbench save` at step 3 or later, then a few more steps."""
    run = long_run
    wait_for(lambda: any(e["step"] >= 3 for e in log_events(run)), timeout=240, what="step 3")
    result = workbench("save", run.run_id, "--timeout", "120")
    said = result.stdout + result.stderr
    match = SAVED.search(said)
    if match:
        step = int(match.group(2))
        wait_for(lambda: any(e["step"] > step + 2 for e in log_events(run)), timeout=60, what="steps after the save")
    return SaveNow(said, refresh(run).status, (run.path / "save.request").exists())


@pytest.fixture(scope="module")
def sigusr1_stop(long_run: RunFolder, save_now: SaveNow) -> tuple[int, RunState]:
    """SIGUSR1 to the trainer after the save: the last step logged before it, the run's state after it."""
    run = long_run
    before = max(e["step"] for e in log_events(run))
    _trainer(run).send_signal(signal.SIGUSR1)
    wait_for(lambda: not refresh(run).is_active, timeout=120, what="the run's end")
    return before, run.read_state()


def test_save_now_makes_a_checkpoint_at_the_next_step_and_training_goes_on(long_run: RunFolder,
                                                                           save_now: SaveNow) -> None:
    match = SAVED.search(save_now.said)
    assert match, save_now.said
    step = int(match.group(2))
    assert match.group(3) == str(step) and step >= 3
    saved = [e for e in _checkpoints(long_run) if e["requested"] is not None]
    assert [(e["step"], e["requested"]) for e in saved][:1] == [(step, "save now")]
    assert judge_checkpoint(Path(match.group(1))).missing == ()
    assert save_now.status_after == "running"
    assert not save_now.request_left  # taken by the trainer


def test_sigusr1_to_the_trainer_saves_and_stops_with_the_reason(long_run: RunFolder,
                                                               sigusr1_stop: tuple[int, RunState]) -> None:
    run, (before, state) = long_run, sigusr1_stop
    assert (state.status, state.failure_reason, state.exit_code) == ("stopped", "saved and stopped on SIGUSR1", 0)
    last = [e for e in _checkpoints(run) if e["requested"] == "SIGUSR1"][0]  # the resume's test may add another
    assert last["step"] >= before
    assert judge_checkpoint(Path(last["path"])).complete
    end = [e for e in read_all(run.events_path) if e["type"] == "run_end"][0]
    assert (end["status"], end["reason"], end["step"]) == ("stopped", "saved and stopped on SIGUSR1", last["step"])


def test_resume_carries_the_step_on_and_sigusr1_to_the_supervisor_saves_and_stops(long_run: RunFolder,
                                                                                  sigusr1_stop: tuple[int, RunState]) -> None:
    run = long_run
    stopped_at = [e for e in _checkpoints(run) if e["requested"] == "SIGUSR1"][0]["step"]
    result = workbench("resume", run.run_id, "--detach")
    assert f"checkpoint-{stopped_at}" in result.stdout
    begin = wait_for(lambda: [e for e in read_all(run.events_path) if e["type"] == "run_begin"][1:], timeout=240,
                     what="the resumed run's start")
    assert begin[0]["start_step"] == stopped_at
    wait_for(lambda: any(e["step"] > stopped_at for e in log_events(run)), timeout=120, what="a step after the resume")
    state = run.read_state()
    os.kill(state.supervisor_pid, signal.SIGUSR1)
    wait_for(lambda: not refresh(run).is_active, timeout=120, what="the resumed run's end")
    state = run.read_state()
    assert (state.status, state.failure_reason, state.attempt) == ("stopped", "saved and stopped on SIGUSR1", 2)
    last = _checkpoints(run)[-1]
    assert last["requested"] == "SIGUSR1" and last["step"] > stopped_at
