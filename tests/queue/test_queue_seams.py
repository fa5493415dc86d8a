"""Where the queue meets the runs (#34 items 4, 5, 6, 9, 10, 15): the OOM retry keeps swift's global batch, the
keeper outlives any launch error and a busy queue lock, a SLURM job id read back from queue.json is only ever an
id, a sweep grid is counted before it is built and each of its runs validated and named apart, an explicit
output_dir gives each run its own folder, and a SLURM run that never started does not stay `starting`.
Expected values are written by hand."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.core.fs import file_lock
from backend.profile import load_profile
from backend.queue import keeper
from backend.queue.store import Entry, QueueFile, edit, read_queue
from backend.rundir.layout import RunFolder
from tests.queue.slurm_fakes import slurm_calls
from tests.runs.helpers import quick_profile, wait_for, workbench

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total capacity)"


def _listing(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip()[:1].isdigit()]


def _failed_oom_run(workspace: Path) -> RunFolder:
    run = RunFolder.create(workspace, "20261204-100000-oomy-0001")
    run.write_state(run.new_state("oomy").model_copy(update={"status": "failed", "failure_reason": OOM}))
    return run


def test_the_oom_retry_of_swifts_default_accumulation_keeps_global_batch_18(
        tmp_path: Path, isolated_runs: Path) -> None:
    """Micro-batch 6 on one process, accumulation left to swift: swift ran 6 x 3 = 18 (not 16 // 6 = 2); the retry
    runs 3 x 6 = 18, says so, and writes beside the failed attempt's explicit output_dir."""
    profile = quick_profile(tmp_path, training={"per_device_train_batch_size": 6, "gradient_accumulation_steps": None},
                            queue={"oom_retry": 1}, output={"output_dir": "ckpt"},
                            model={"source": str(tmp_path / "no-such-model")})  # the retry's launch is refused
    run = _failed_oom_run(isolated_runs)
    folder = tmp_path / "data" / "queue"
    (folder / "profiles").mkdir(parents=True)
    queued = folder / "profiles" / "q000001.toml"
    queued.write_text(profile.read_text())
    with edit(folder) as queue:
        queue.entries.append(Entry(id="q000001", name="oomy", profile_file=str(queued), base_dir=str(tmp_path),
                                   state="running", run_id=run.run_id, run_dir=str(run.path)))
    workbench("queue")  # starts the keeper: it sees the OOM, queues the retry and tries it
    wait_for(lambda: not read_queue(folder).keeps_keeper(), 60, "the retry tried")
    first, retry = read_queue(folder).entries
    assert (first.outcome, retry.attempt, retry.parent) == ("failed", 2, "q000001")
    assert retry.note == ("OOM retry: micro-batch 6 -> 3, accumulation 3 (swift's default) -> 6; global batch 18 "
                          "kept (3 x 6 x 1 process(es)); writes to ckpt-attempt2")
    again = load_profile(retry.profile_file)
    assert (again.training.per_device_train_batch_size, again.training.gradient_accumulation_steps) == (3, 6)
    assert again.output.output_dir == "ckpt-attempt2"
    listing = _listing(workbench("queue").stdout)
    assert listing[1].endswith("global batch 18 kept (3 x 6 x 1 process(es)); writes to ckpt-attempt2]")


@pytest.fixture
def three_entries(tmp_path: Path, isolated_runs: Path) -> Path:
    """A queue of three waiting quickstart entries (not started: the tests patch the launch)."""
    runner = CliRunner()
    result = runner.invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path, sweep={
        "training.learning_rate": [1e-4, 2e-4, 3e-4]})), "--hold"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "data" / "queue"
    with edit(folder) as queue:
        for entry in queue.entries:
            entry.state = "waiting"
    return folder


def _no_launch(message: str) -> object:
    def start_run(*_: object, **__: object) -> object:
        raise ValueError(message)
    return start_run


def test_a_launch_error_ends_its_entry_not_the_keeper(three_entries: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backend.runs.start.start_run", _no_launch("the command builder refused"))
    assert keeper.main(three_entries) == 0  # returns once every entry had its turn
    entries = read_queue(three_entries).entries
    assert [(e.state, e.outcome, e.reason) for e in entries] == [
        ("done", "refused", "the launch failed: ValueError: the command builder refused")] * 3
    lines = _listing(CliRunner().invoke(full_app(), ["queue"]).output)
    assert lines[0].endswith("refused: the launch failed: ValueError: the command builder refused")


def test_a_busy_queue_lock_is_waited_out_not_taken_for_another_keeper(
        three_entries: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`queue add --slurm` may hold the queue lock longer than a keeper waits for it: the keeper looks again."""
    monkeypatch.setattr("backend.runs.start.start_run", _no_launch("stop here"))
    monkeypatch.setattr("backend.queue.store.LOCK_WAIT_S", 0.2)
    said: list[str] = []
    busy_seen = threading.Event()

    def log(message: str) -> None:
        said.append(message)
        if message.startswith("the queue file is busy"):
            busy_seen.set()

    monkeypatch.setattr(keeper, "_log", log)
    holding = threading.Event()

    def hold() -> None:
        with file_lock(three_entries / "queue.lock"):
            holding.set()
            busy_seen.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(30)
    try:
        assert keeper.main(three_entries) == 0
    finally:
        busy_seen.set()
        holder.join()
    assert not any("another keeper" in line for line in said)
    assert "the queue file is busy (another command holds its lock): looking again" in said, "\n".join(said)
    assert [e.outcome for e in read_queue(three_entries).entries] == ["refused"] * 3


def test_a_slurm_job_id_that_is_no_id_never_reaches_scancel(tmp_path: Path, fake_slurm_path: Path) -> None:
    folder = tmp_path / "data" / "queue"
    folder.mkdir(parents=True)
    (folder / "queue.json").write_text(json.dumps({"v": 1, "entries": [
        {"id": "q0a0b0c", "name": "x", "profile_file": "/p.toml", "base_dir": "/", "state": "slurm",
         "slurm_job_id": "--user=root"}]}))
    result = CliRunner().invoke(full_app(), ["queue", "rm", "q0a0b0c"])
    assert result.exit_code == 2
    assert "entries.0.slurm_job_id: String should match pattern" in result.output
    assert not [c for c in slurm_calls(fake_slurm_path) if c.startswith("scancel")]
    assert len(list(folder.glob("queue.json.damaged-*"))) == 1  # set aside, never emptied


def test_a_5x16_grid_is_refused_by_its_count_before_it_is_built(tmp_path: Path, isolated_runs: Path) -> None:
    values = [i * 1e-5 for i in range(1, 17)]
    grid = {"training.learning_rate": values, "training.weight_decay": values, "training.warmup_ratio": values,
            "training.max_grad_norm": values, "tuner.lora_dropout": values}
    result = CliRunner().invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path, sweep=grid)), "--hold"])
    assert result.exit_code == 2
    assert ("[sweep] of quickstart-test: 16 x 16 x 16 x 16 x 16 values make 1,048,576 runs, more than the 256 a "
            "sweep may queue") in " ".join(result.output.split())
    assert not (tmp_path / "data" / "queue" / "queue.json").exists()


def test_sweep_runs_are_named_apart_and_each_gets_its_own_output_dir(tmp_path: Path, isolated_runs: Path) -> None:
    path = quick_profile(tmp_path, sweep={"training.learning_rate": [1e-4, 1.5e-4]}, output={"output_dir": "ckpt"})
    result = CliRunner().invoke(full_app(), ["queue", "add", str(path), "--hold"])
    assert result.exit_code == 0, result.output
    entries = read_queue(tmp_path / "data" / "queue").entries
    assert [e.name for e in entries] == ["quickstart-test-lr1.0e-04", "quickstart-test-lr1.5e-04"]
    assert [load_profile(e.profile_file).output.output_dir for e in entries] == [
        "ckpt/quickstart-test-lr1.0e-04", "ckpt/quickstart-test-lr1.5e-04"]


def test_every_sweep_point_is_validated_at_queue_add(tmp_path: Path, isolated_runs: Path) -> None:
    path = quick_profile(tmp_path, sweep={"model.source": ["builtin:tiny-qwen2", "--help"]})
    result = CliRunner().invoke(full_app(), ["queue", "add", str(path), "--hold"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "not queued (1 of 2 run(s) would be refused at launch; nothing was queued)" in text
    assert "quickstart-test-source--help: error: [model.source] '--help' begins with '-'" in text
    assert not (tmp_path / "data" / "queue" / "queue.json").exists()


def test_a_run_sbatch_refused_is_removed_and_a_cancelled_one_can_be_deleted(
        tmp_path: Path, tiny_model: Path, fake_slurm_path: Path, isolated_runs: Path) -> None:
    (fake_slurm_path / "sbatch-refuses").touch()
    runner = CliRunner()
    result = runner.invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm"])
    assert result.exit_code == 2
    assert "its run folder was removed again (nothing was submitted for it)" in " ".join(result.output.split())
    assert not isolated_runs.exists() or list(isolated_runs.iterdir()) == []
    (fake_slurm_path / "sbatch-refuses").unlink()

    result = runner.invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm"])
    assert result.exit_code == 0, result.output
    (entry,) = read_queue().entries
    (fake_slurm_path / "squeue.txt").write_text("1001|PENDING|Priority\n")
    result = runner.invoke(full_app(), ["queue", "rm", entry.id])
    assert result.exit_code == 0, result.output
    assert slurm_calls(fake_slurm_path)[-1] == "scancel -- 1001"
    assert RunFolder(str(entry.run_dir)).read_state().status == "stopped"
    result = runner.invoke(full_app(), ["delete", str(entry.run_id), "--yes"])
    assert result.exit_code == 0, result.output
    assert not Path(str(entry.run_dir)).exists()


def test_a_profile_left_to_device_auto_asks_slurm_for_no_gpu(tmp_path: Path, tiny_model: Path,
                                                             fake_slurm_path: Path) -> None:
    result = CliRunner().invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm"])
    assert result.exit_code == 0, result.output
    (entry,) = read_queue().entries
    assert "--gpus-per-node" not in (Path(str(entry.run_dir)) / "job.sbatch").read_text()
    assert ('[[distribution] device is "auto": the job asks for no GPU (set device = "cuda" to ask for '
            'nproc_per_node GPUs per node, or name them with --gpus-per-node)]') in " ".join(result.output.split())


def test_queue_file_round_trip_keeps_the_checked_ids() -> None:
    queue = QueueFile(entries=[Entry(id="q1", name="n", profile_file="/p", base_dir="/", state="slurm",
                                     slurm_job_id="1001_3", slurm_dependency="1000")])
    assert QueueFile.model_validate_json(queue.model_dump_json()).entries[0].slurm_job_id == "1001_3"


def test_a_stopped_entry_whose_run_was_resumed_says_so(tmp_path: Path, isolated_runs: Path) -> None:
    """#34 (low): `workbench resume` goes on in the entry's run folder; the list said "stopped" for ever."""
    run = RunFolder.create(isolated_runs, "20261204-100000-resumed-0001")
    run.write_state(run.new_state("resumed").model_copy(update={"status": "running", "attempt": 2}))
    folder = tmp_path / "data" / "queue"
    with edit(folder) as queue:
        queue.entries.append(Entry(id="q000002", name="resumed", profile_file="/p.toml", base_dir="/", state="done",
                                   outcome="stopped", run_id=run.run_id, run_dir=str(run.path)))
    lines = _listing(CliRunner().invoke(full_app(), ["queue"]).output)
    assert lines[0].endswith(f"stopped ({run.run_id}); resumed since (attempt 2): running")
