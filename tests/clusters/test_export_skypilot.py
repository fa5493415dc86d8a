"""`workbench export skypilot` (#40 item 1): the task YAML of the quickstart, a 2-node FSDP profile and a spot
profile, each read back by SkyPilot's own parser (the real `skypilot` of the test extra, in the oracle's
child); resources, nodes and the bucket mount are checked against values written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.oracle.sky_task import check_task
from tests.runs.helpers import quick_profile

ALL_GPUS = ("T4", "L4", "A10G", "A10", "L40S", "A100", "A100-80GB", "H100", "H200")
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _export(*args: str) -> tuple[str, str]:
    """The written task's text and the command's output."""
    result = CliRunner().invoke(full_app(), ["export", "skypilot", *args])
    assert result.exit_code == 0, result.output
    path = Path(args[args.index("-o") + 1])
    return path.read_text(), result.output


def _parsed(text: str) -> dict[str, Any]:
    """SkyPilot's own reading of the task (sky.Task.from_yaml_config, then written back by SkyPilot)."""
    return check_task(text)["task"]


def test_the_quickstart_goes_to_skypilot_as_a_checked_task(tmp_path: Path, isolated_runs: Path, tiny_model: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_the-secret-value")
    out = tmp_path / "task.yaml"
    text, output = _export("quickstart", "--bucket", "team-runs", "--accelerator", "L4", "-o", str(out))
    task = _parsed(text)
    assert task["resources"]["accelerators"] == {"L4": 1}
    assert task["resources"]["use_spot"] is False
    assert task["resources"]["job_recovery"] == {"strategy": "FAILOVER", "max_restarts_on_errors": 0}
    assert task["num_nodes"] == 1
    assert task["file_mounts"] == {"/workbench-runs": {"name": "team-runs", "persistent": True, "mode": "MOUNT"}}
    assert task["envs"] == {"WORKBENCH_WORKSPACE": "/workbench-runs"}
    assert task["workdir"] == str(SOURCE_ROOT)
    # the secret by name only: SkyPilot takes its value from the launching shell (--secret HF_TOKEN)
    assert yaml.safe_load(text)["secrets"] == {"HF_TOKEN": None}
    assert "hf_the-secret-value" not in text
    run_id = next(line.split()[1] for line in output.splitlines() if line.strip().startswith("run "))
    assert text.splitlines()[-1] == (f"  exec ~/workbench-venv/bin/python -m backend.cli.supervise sky "
                                     f"~/workbench-job/job.toml {run_id}")
    assert "  save_on_term = true" in text.splitlines()  # a preemption's SIGTERM saves, then stops
    assert f"  submit: sky jobs launch {out} --secret HF_TOKEN --yes" in output


def test_a_two_node_fsdp_profile_asks_two_nodes_of_gpus_the_forecast_fits(
        tmp_path: Path, isolated_runs: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    profile = quick_profile(tmp_path, distribution={"strategy": "fsdp", "device": "cuda", "nproc_per_node": 2,
                                                    "num_machines": 2, "gpu_ids": [0, 1]},
                            precision={"bf16": False, "fp16": False, "tf32": False})
    text, output = _export(str(profile), "--bucket", "team-runs", "-o", str(tmp_path / "fsdp.yaml"))
    task = _parsed(text)
    assert task["num_nodes"] == 2
    # the tiny model's forecast fits every GPU of the table: SkyPilot reads them as any_of (it picks the
    # cheapest it gets), two a node, each with the same host memory and recovery
    choices = task["resources"]["any_of"]
    assert sorted(name for choice in choices for name in choice["accelerators"]) == sorted(ALL_GPUS)
    assert all(list(choice["accelerators"].values()) == [2] for choice in choices)
    memory = {choice["memory"] for choice in choices}
    assert len(memory) == 1 and memory.pop().endswith("+")
    assert all(choice["job_recovery"] == {"strategy": "FAILOVER", "max_restarts_on_errors": 0} for choice in choices)
    assert task["file_mounts"]["/workbench-runs"]["mode"] == "MOUNT"
    assert "secrets" not in yaml.safe_load(text)
    job = text.split("<<'WORKBENCH_PROFILE_END'\n", 1)[1].split("WORKBENCH_PROFILE_END", 1)[0]
    assert "  num_machines = 2\n" in job and '  strategy = "fsdp"\n' in job and "gpu_ids" not in job
    assert "accelerators: any of T4, L4, A10G, A10, L40S, A100, A100-80GB, H100, H200 x 2" in output


def test_a_spot_profile_recovers_from_a_bucket_uri(tmp_path: Path, isolated_runs: Path, tiny_model: Path) -> None:
    text, _ = _export("quickstart", "--bucket", "s3://team-bucket/runs", "--spot", "--infra", "aws",
                      "--max-restarts", "2", "--accelerator", "A100", "-o", str(tmp_path / "spot.yaml"))
    task = _parsed(text)
    assert task["resources"]["use_spot"] is True
    assert task["resources"]["infra"] == "aws"
    assert task["resources"]["accelerators"] == {"A100": 1}
    assert task["resources"]["job_recovery"] == {"strategy": "FAILOVER", "max_restarts_on_errors": 2}
    assert task["file_mounts"] == {"/workbench-runs": {"source": "s3://team-bucket/runs", "persistent": True,
                                                       "mode": "MOUNT"}}


def test_skypilot_s_own_parser_refuses_what_it_does_not_know(tmp_path: Path, isolated_runs: Path,
                                                             tiny_model: Path) -> None:
    out = tmp_path / "task.yaml"
    result = CliRunner().invoke(full_app(), ["export", "skypilot", "quickstart", "--bucket", "team-runs",
                                             "--infra", "nocloud", "--accelerator", "L4", "-o", str(out)])
    assert result.exit_code == 2
    assert "SkyPilot refused the task: InvalidSkyPilotConfigError: Invalid resources YAML: 'nocloud' does not match" \
        in result.output
    assert "$.infra" in result.output
    assert not out.exists()


@pytest.mark.parametrize(("option", "value", "said"), [
    ("--bucket", "Team_Runs;rm -rf ~", "--bucket 'Team_Runs;rm -rf ~': give a bucket name"),
    ("--accelerator", "A100 --x", "--accelerator 'A100 --x': give a GPU name"),
    ("--infra", "aws\x1b[2J", "--infra 'aws\\x1b[2J': give a cloud"),
])
def test_a_bad_option_is_refused_before_anything_is_asked(tmp_path: Path, isolated_runs: Path, option: str,
                                                          value: str, said: str) -> None:
    args = ["export", "skypilot", "quickstart", "--bucket", "team-runs", option, value]
    result = CliRunner().invoke(full_app(), args)
    assert result.exit_code == 2
    assert said in result.output
    assert "\x1b" not in result.output


def test_without_skypilot_the_export_says_how_to_install_it(tmp_path: Path, isolated_runs: Path, tiny_model: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backend.oracle.library_versions", lambda names: {name: "missing" for name in names})
    result = CliRunner().invoke(full_app(), ["export", "skypilot", "quickstart", "--bucket", "team-runs",
                                             "--accelerator", "L4"])
    assert result.exit_code == 2
    assert 'skypilot is not installed, so SkyPilot cannot check the task; install it with `pip install -e ".[cloud]"`' \
        in result.output
