"""`workbench queue add --slurm` (#25 step 6) against a fake SLURM on PATH (tests/queue/slurm_fakes.py: sbatch,
squeue and scancel are scripts that write their arguments to a log; sbatch answers job ids 1001, 1002 ...;
squeue prints what the test put in a file). Expected commands and listings are written by hand."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.queue.store import read_queue
from tests.queue.slurm_fakes import slurm_calls as _calls
from tests.runs.helpers import quick_profile


def _listing(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip()[:1].isdigit()]


def test_queue_add_slurm_submits_in_order_lists_squeue_and_cancels(
        tmp_path: Path, tiny_model: Path, fake_slurm_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = fake_slurm_path
    profile = quick_profile(tmp_path, sweep={"training.learning_rate": [1e-4, 2e-4]},
                            distribution={"device": "cuda", "nproc_per_node": 2, "gpu_ids": [0, 1]},
                            queue={"memory_margin": 0.5})
    runner = CliRunner()
    result = runner.invoke(full_app(), ["queue", "add", str(profile), "--slurm", "--partition", "gpu"])
    assert result.exit_code == 0, result.output
    first, second = read_queue().entries
    assert (first.state, first.slurm_job_id, first.slurm_dependency) == ("slurm", "1001", None)
    assert (second.state, second.slurm_job_id, second.slurm_dependency) == ("slurm", "1002", "1001")
    runs = [first.run_dir, second.run_dir]
    sbatch = [c for c in _calls(folder) if c.startswith("sbatch")]
    assert sbatch == [f"sbatch --parsable {runs[0]}/job.sbatch",
                      f"sbatch --parsable --dependency=afterany:1001 {runs[1]}/job.sbatch"]
    assert f"submitted {first.id}  quickstart-test-lr1e-04: SLURM job 1001, run {first.run_id}" in result.output
    assert f"SLURM job 1002 after job 1001, run {second.run_id}" in result.output
    script = (Path(str(runs[0])) / "job.sbatch").read_text().splitlines()
    assert first.forecast_bytes is not None and first.forecast_bytes > 0
    mem = -(-int(first.forecast_bytes * 1.5) // 1024**2)  # forecast + 50 % margin, in MiB, rounded up
    assert f"#SBATCH --mem={mem}M" in script
    assert "#SBATCH --gpus-per-node=2" in script and "#SBATCH --partition=gpu" in script
    assert not (tmp_path / "data" / "queue" / "keeper.json").exists()  # SLURM runs them, not the keeper

    # the list: what squeue says of each job; a job squeue no longer lists is unknown
    (folder / "squeue.txt").write_text("1002|PENDING|Dependency\n977|RUNNING|None\n")
    listing = runner.invoke(full_app(), ["queue"])
    assert listing.exit_code == 0, listing.output
    assert f"squeue --noheader --format=%i|%T|%r --states=all --user={getpass.getuser()}" in _calls(folder)
    lines = _listing(listing.output)
    assert lines[0].split(None, 5)[1:] == [first.id, "quickstart-test-lr1e-04", "slurm", "-", (
        f"SLURM job 1001: unknown (no longer in squeue: finished, cancelled or purged; its run: "
        f"`workbench status {first.run_id}`)")]
    assert lines[1].split(None, 5)[1:] == [second.id, "quickstart-test-lr2e-04", "slurm", "-",
                                           "SLURM job 1002: PENDING (Dependency)"]
    (folder / "squeue.txt").write_text("1002|RUNNING|None\n")
    lines = _listing(runner.invoke(full_app(), ["queue"]).output)
    assert lines[1].endswith("SLURM job 1002: PENDING (Dependency)")  # squeue asked at most every 10 s
    monkeypatch.setattr("backend.queue.slurm._last_answer", None)  # 10 s later
    lines = _listing(runner.invoke(full_app(), ["queue"]).output)
    assert lines[1].endswith(f"SLURM job 1002: RUNNING as {second.run_id}")

    # a third one goes after the last job squeue still lists
    (folder / "squeue.txt").write_text("1002|RUNNING|None\n")
    plain = quick_profile(tmp_path, distribution={"device": "cpu"})
    result = runner.invoke(full_app(), ["queue", "add", str(plain), "--slurm"])
    assert result.exit_code == 0, result.output
    third = read_queue().entries[2]
    assert _calls(folder)[-1] == f"sbatch --parsable --dependency=afterany:1002 {third.run_dir}/job.sbatch"
    assert "#SBATCH --gpus-per-node" not in (Path(str(third.run_dir)) / "job.sbatch").read_text()  # a CPU profile

    # rm: scancel of that job id only
    result = runner.invoke(full_app(), ["queue", "rm", second.id])
    assert result.exit_code == 0, result.output
    assert _calls(folder)[-1] == "scancel -- 1002"
    assert "SLURM job 1002 cancelled (scancel 1002)" in result.output
    result = runner.invoke(full_app(), ["queue", "rm", first.id])  # squeue forgot it: scancel says so
    assert result.exit_code == 0, result.output
    assert _calls(folder)[-1] == "scancel -- 1001" and "SLURM job 1001 was over already" in result.output
    assert [e.id for e in read_queue().entries] == [third.id]
    assert [c.split()[0] for c in _calls(folder)].count("scancel") == 2


def test_sbatch_refusing_is_said_and_the_ones_before_it_are_kept(tmp_path: Path, tiny_model: Path,
                                                                 fake_slurm_path: Path) -> None:
    (fake_slurm_path / "sbatch-refuses").touch()
    result = CliRunner().invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm"])
    assert result.exit_code == 2
    assert "sbatch refused the job (sbatch: error: Batch job submission failed: Invalid account)" in result.output
    assert read_queue().entries == []


def test_slurm_without_sbatch_on_path_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       isolated_runs: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = CliRunner().invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm"])
    assert result.exit_code == 2
    assert "--slurm: `sbatch` is not on PATH" in result.output and "without --slurm" in result.output
    assert not (tmp_path / "data" / "queue" / "queue.json").exists()
    result = CliRunner().invoke(full_app(), ["queue", "add", str(quick_profile(tmp_path)), "--slurm", "--hold"])
    assert result.exit_code == 2 and "--slurm does not take --hold" in result.output
