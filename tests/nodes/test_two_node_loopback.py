"""Two "machines" on loopback: each one CPU process, started from the command `workbench show --node K`
printed for it, form one gloo DDP run whose two ranks see the same losses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backend.contract.events import read_all
from backend.launch.nodes import free_port
from tests.nodes.nodes_helpers import kill_group, losses, two_machine_profile, workbench
from tests.timing import scaled


def _printed_command(profile: Path, rank: int, run_dir: Path) -> str:
    """The last line `workbench show --node K` prints is machine K's command."""
    shown = workbench("show", str(profile), "--node", str(rank), "--run-dir", str(run_dir))
    lines = shown.stdout.strip().splitlines()
    assert lines[-2].startswith(f"# machine {rank} of 2"), shown.stdout
    return lines[-1]


@pytest.mark.slow
def test_two_machines_on_loopback_train_as_one(tmp_path: Path, tiny_model: Path) -> None:
    profile = two_machine_profile(tmp_path, port=free_port())
    folders = [tmp_path / "machine0", tmp_path / "machine1"]  # each "machine" keeps its own run folder
    commands = [_printed_command(profile, rank, folders[rank]) for rank in (0, 1)]
    assert "--machine_rank 0" in commands[0] and "--machine_rank 1" in commands[1]
    processes = []
    try:
        for rank, command in enumerate(commands):
            log = open(tmp_path / f"machine{rank}.log", "wb")
            processes.append(subprocess.Popen(["bash", "-c", command], stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        codes = [p.wait(timeout=scaled(240)) for p in processes]
    finally:
        for process in processes:
            kill_group(process)
    logs = [(tmp_path / f"machine{rank}.log").read_text(errors="replace")[-3000:] for rank in (0, 1)]
    assert codes == [0, 0], logs
    begin = {e["rank"]: e for f in folders for e in read_all(f / "events.jsonl") if e["type"] == "run_begin"}
    assert sorted(begin) == [0, 1]
    assert all(b["world_size"] == 2 and b["distributed_type"] == "MULTI_CPU" for b in begin.values())
    rank0, rank1 = losses(folders[0] / "events.jsonl", 0), losses(folders[1] / "events.jsonl", 1)
    assert len(rank0) == 6 and rank0 == rank1  # the logged loss is the mean over both ranks
    assert rank0[-1] < rank0[0]
    # one training, not two identical ones: each step takes one row per rank, so an epoch of the
    # 53-row set lasts about 26 steps (two independent processes would each need about 52)
    first = next(e for e in read_all(folders[0] / "events.jsonl") if e["type"] == "log")
    assert 1 / first["epoch"] < 30
