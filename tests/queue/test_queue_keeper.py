"""The keeper on real runs of the tiny model (one module, four short runs in all): a 2-value sweep and an
OOM profile queued by one command run one after another (max_parallel 1); the keeper is killed -9 mid-way
and the next `workbench queue` starts it again, nothing lost or run twice; the OOM run (injected at step 2
by the callback's test hook) is queued again with half the micro-batch and twice the accumulation, from its
last complete checkpoint, once (oom_retry = 1)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from backend.checkpoints.board_text import summary
from backend.checkpoints.scoreboard import scoreboard
from backend.queue.keeper import keeper_marker, keeper_pid
from backend.queue.store import QueueFile, read_queue
from backend.rundir.layout import RunFolder
from backend.runs.attempts import attempt_text
from tests.runs.helpers import quick_profile, wait_for, workbench

pytestmark = pytest.mark.slow  # the keeper starts real trainings
FAST = {"max_steps": 1, "save_steps": 1, "logging_steps": 1}  # ends before the OOM hook's step 2


def _arg(run_dir: str | None, flag: str) -> str | None:
    """The value of `flag` in the run's command (`--flag value` or, for extra_swift_args, `--flag=value`)."""
    argv = json.loads((Path(str(run_dir)) / "command.json").read_text(encoding="utf-8"))["argv"]
    joined = [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
    return argv[argv.index(flag) + 1] if flag in argv else (joined[0] if joined else None)


@pytest.fixture(scope="module")
def queued(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("queue")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WORKBENCH_DATA_DIR", str(root / "data"))
        env.setenv("WORKBENCH_WORKSPACE", str(root / "runs"))
        (root / "a").mkdir()
        (root / "c").mkdir()
        sweep = quick_profile(root / "a", training=FAST, sweep={"training.learning_rate": [1e-3, 2e-3]})
        oom = quick_profile(root / "c", training={"max_steps": 3, "save_steps": 1, "logging_steps": 1,
                                                  "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1},
                            queue={"oom_retry": 1})
        env.setenv("WORKBENCH_INJECT_OOM_STEP", "2")  # the keeper and its runs inherit it (a profile's [env] may not)
        folder = root / "data" / "queue"
        try:
            added = workbench("queue", "add", str(sweep), str(oom))
            first_keeper = wait_for(lambda: keeper_pid(folder), 30, "the keeper")
            first_session = os.getsid(first_keeper)
            wait_for(lambda: read_queue(folder).entries[0].run_id, 120, "the first run's id in its entry")
            os.kill(first_keeper, signal.SIGKILL)
            wait_for(lambda: keeper_pid(folder) is None, 10, "the keeper gone")
            listing = workbench("queue")  # the next command starts it again
            second_keeper = wait_for(lambda: keeper_pid(folder), 30, "the second keeper")
            sessions = (first_session, os.getsid(second_keeper))
            wait_for(lambda: not read_queue(folder).keeps_keeper(), 600, "every queued run done")
            wait_for(lambda: keeper_pid(folder) is None, 30, "the keeper's exit")
            yield {"queue": read_queue(folder), "root": root, "added": added.stdout, "listing": listing.stdout,
                   "keepers": (first_keeper, second_keeper), "sessions": sessions, "log": (folder / "keeper.log").read_text()}
        finally:
            for proc in keeper_marker(folder).processes():
                proc.kill()


def test_queued_runs_ran_one_after_another_once_each_across_a_killed_keeper(queued: Any) -> None:
    queue: QueueFile = queued["queue"]
    first, second = queued["keepers"]
    assert first != second
    assert queued["sessions"] == (first, second)  # each in a session of its own: a closed terminal never reaches it
    assert [(e.name, e.state, e.outcome) for e in queue.entries] == [
        ("quickstart-test-lr0.001", "done", "finished"), ("quickstart-test-lr0.002", "done", "finished"),
        ("quickstart-test", "done", "failed"), ("quickstart-test", "done", "failed")]
    run_dirs = [e.run_dir for e in queue.entries]
    assert len(set(run_dirs)) == 4
    assert sorted(p.name for p in (queued["root"] / "runs").iterdir()) == sorted(Path(str(d)).name for d in run_dirs)
    states = [RunFolder(d).read_state() for d in run_dirs]  # type: ignore[arg-type]
    for before, after in zip(states, states[1:], strict=False):
        assert before.ended_at is not None and after.created_at >= before.ended_at - 1.0  # max_parallel 1


def test_an_oom_is_retried_with_the_same_global_batch_from_the_last_checkpoint(queued: Any) -> None:
    failed, retry = queued["queue"].entries[2:]
    assert "CUDA out of memory" in (failed.reason or "")
    assert (retry.attempt, retry.parent) == (2, failed.id)
    checkpoint = str(Path(failed.run_dir or "") / "output" / "checkpoint-1")
    assert retry.note == (f"OOM retry: micro-batch 2 -> 1, accumulation 1 -> 2; global batch 2 kept (1 x 2 x 1 "
                          f"process(es)); resumes from {checkpoint} (same global batch: its learning-rate schedule "
                          f"goes on); CUDA out of memory again: oom_retry 1 used up")
    assert (_arg(failed.run_dir, "--per_device_train_batch_size"), _arg(failed.run_dir,
                                                                        "--gradient_accumulation_steps")) == ("2", "1")
    assert _arg(retry.run_dir, "--per_device_train_batch_size") in (None, "1")  # 1 is the default, not passed
    assert _arg(retry.run_dir, "--gradient_accumulation_steps") == "2"
    assert _arg(retry.run_dir, "--resume_from_checkpoint") == checkpoint
    # linked both ways in the run folders: the runs list and the scoreboard say it
    assert attempt_text(str(retry.run_dir)) == f"attempt 2 of {failed.run_id}, half micro-batch"
    assert attempt_text(str(failed.run_dir)) == f"retried as {retry.run_id} (attempt 2, half micro-batch)"
    assert summary(scoreboard(RunFolder(str(retry.run_dir)))).startswith(
        f"attempt 2 of {failed.run_id}, half micro-batch · ")
