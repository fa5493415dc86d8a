"""#34 (c): a profile whose device is "auto" asks a cluster for GPUs by one rule, whichever the exporter:
GPUs only when the submission names them (SLURM's --gpus-per-node, SkyPilot's --accelerator), else none,
and the command says which. The quickstart profile leaves its device to "auto" (1 process a node)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from backend.cli.app import full_app

NO_GPU_NOTE = (
    '[distribution] device is "auto": the job asks for no GPU (set device = "cuda" to ask for '
    "nproc_per_node GPUs per node, or name them with {option})"
)


def _export(*args: str) -> list[str]:
    result = CliRunner().invoke(full_app(), ["export", *args])
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines()]


def _job_device(task_text: str) -> str:
    job = task_text.split("<<'WORKBENCH_PROFILE_END'\n", 1)[1].split("WORKBENCH_PROFILE_END", 1)[0]
    return next(line.strip() for line in job.splitlines() if line.strip().startswith("device = "))


def test_slurm_auto_asks_no_gpu_unless_named(tmp_path: Path, isolated_runs: Path, tiny_model: Path) -> None:
    plain = tmp_path / "plain.sbatch"
    lines = _export("slurm", "quickstart", "-o", str(plain))
    assert NO_GPU_NOTE.format(option="--gpus-per-node") in lines
    assert not [line for line in plain.read_text().splitlines() if "gpus-per-node" in line]
    named = tmp_path / "named.sbatch"
    lines = _export("slurm", "quickstart", "-o", str(named), "--gpus-per-node", "2")
    assert '[distribution] device is "auto": the job asks for 2 GPU(s) per node, as --gpus-per-node named' in lines
    assert "#SBATCH --gpus-per-node=2" in named.read_text().splitlines()


def test_skypilot_auto_asks_no_gpu_unless_named(tmp_path: Path, isolated_runs: Path, tiny_model: Path) -> None:
    plain = tmp_path / "plain.yaml"
    lines = _export("skypilot", "quickstart", "--bucket", "team-runs", "-o", str(plain))
    assert NO_GPU_NOTE.format(option="--accelerator") in lines
    text = plain.read_text()
    resources = yaml.safe_load(text)["resources"]
    assert "accelerators" not in resources and "any_of" not in resources and resources["cpus"] == "4+"
    assert _job_device(text) == 'device = "cpu"'
    named = tmp_path / "named.yaml"
    lines = _export("skypilot", "quickstart", "--bucket", "team-runs", "--accelerator", "L4", "-o", str(named))
    assert '[distribution] device is "auto": the job asks for 1 GPU(s) per node, as --accelerator named' in lines
    text = named.read_text()
    assert yaml.safe_load(text)["resources"]["accelerators"] == "L4:1"
    assert _job_device(text) == 'device = "cuda"'
