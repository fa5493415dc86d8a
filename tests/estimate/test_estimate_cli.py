"""`workbench estimate` through Typer's CliRunner, on folders that hold only a config.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from estimate_helpers import FIXTURES, GIB
from typer.testing import CliRunner

from backend.cli.estimate import register

runner = CliRunner()


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:  # a callback keeps `estimate` a sub-command, as in the real CLI
        """workbench"""

    return app


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A folder with nothing but config.json (no weights, no tokenizer)."""
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    shutil.copy(FIXTURES / "qwen2_5_7b" / "config.json", folder / "config.json")
    return folder


def run_json(app: typer.Typer, *args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_output_from_config_only(app: typer.Typer, model_dir: Path) -> None:
    data = run_json(app, "--model", str(model_dir), "--tuner", "qlora", "--gpu-memory", "24", "--host-memory", "64")
    assert {"per_device_total_bytes", "host_total_bytes", "breakdown", "seed", "fit"} <= set(data)
    assert data["per_device_total_bytes"] == sum(data["breakdown"].values())
    assert data["breakdown"]["weights_quantized"] > 0
    assert data["seed"]["phi"] == 12 * 28 * 3584**2
    assert data["fit"]["gpu_memory_bytes"] == 24 * GIB
    assert data["fit"]["host_memory_bytes"] == 64 * GIB
    # the shape is transformers' own (the model-shape child answered), not the formula's guess
    assert (data["model"]["source"], data["model"]["count"]) == ("transformers", "exact (transformers)")
    assert data["model"]["total_params"] == 7_615_616_512  # Qwen2.5-7B as its model card counts it
    assert data["model"]["decoder_layer_class"] == "Qwen2DecoderLayer"


def test_every_documented_option(app: typer.Typer, model_dir: Path) -> None:
    data = run_json(
        app, "--model", str(model_dir), "--tuner", "lora", "--lora-rank", "16", "--precision", "bf16",
        "--distribution", "fsdp", "--fsdp-strategy", "SHARD_GRAD_OP", "--zero-stage", "3", "--offload",
        "--num-gpus", "4", "--num-nodes", "2", "--batch-size", "2", "--max-length", "4096",
        "--no-gradient-checkpointing", "--gpu-memory", "80", "--host-memory", "512",
    )
    req = data["request"]
    assert (req["tuner"], req["lora_rank"], req["distribution"], req["fsdp_strategy"]) == ("lora", 16, "fsdp",
                                                                                           "SHARD_GRAD_OP")
    assert (req["num_gpus"], req["num_nodes"], req["batch_size"], req["max_length"]) == (4, 2, 2, 4096)
    assert req["offload"] is True and req["gradient_checkpointing"] is False


def test_deepspeed_options(app: typer.Typer, model_dir: Path) -> None:
    data = run_json(app, "--model", str(model_dir), "--tuner", "full", "--distribution", "deepspeed",
                    "--zero-stage", "3", "--num-gpus", "8", "--gpu-memory", "80")
    assert "ZeRO-3" in data["sharding"]
    assert data["breakdown"]["master_weights"] > 0


def test_table_output(app: typer.Typer, model_dir: Path) -> None:
    result = runner.invoke(app, ["estimate", "--model", str(model_dir), "--gpu-memory", "24"])
    assert result.exit_code == 0, result.output
    for needle in ("Per-device GPU memory", "total", "Textbook", "largest max_length"):
        assert needle in result.stdout


def test_missing_config_exits_2_with_a_clear_message(app: typer.Typer, tmp_path: Path) -> None:
    result = runner.invoke(app, ["estimate", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "no config.json" in result.output


def test_config_without_a_needed_key_exits_2(app: typer.Typer, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    result = runner.invoke(app, ["estimate", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "num_hidden_layers" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tuner", "prefix"], "--tuner"),
        (["--zero-stage", "5"], "--zero-stage"),
        (["--batch-size", "0"], "--batch-size"),
        (["--fsdp-strategy", "EVERYTHING"], "--fsdp-strategy"),
        (["--offload"], "offload needs distribution fsdp or deepspeed"),
        (["--num-gpus", "2"], "distribution 'single'"),
    ],
)
def test_bad_option_values_exit_2(app: typer.Typer, model_dir: Path, args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["estimate", "--model", str(model_dir), *args])
    assert result.exit_code == 2
    assert needle in result.output


def test_nothing_to_estimate_exits_2(app: typer.Typer) -> None:
    result = runner.invoke(app, ["estimate"])
    assert result.exit_code == 2
    assert "--model" in result.output


def test_profile_with_cli_overrides(app: typer.Typer, model_dir: Path, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(f'''
name = "qwen-qlora"

[model]
source = "{model_dir}"
torch_dtype = "bfloat16"

[tuner]
type = "qlora"
lora_rank = 32

[precision]
bf16 = true

[distribution]
strategy = "fsdp"
nproc_per_node = 2

[training]
per_device_train_batch_size = 2
max_length = 1024
''')
    data = run_json(app, str(profile), "--gpu-memory", "24")
    req = data["request"]
    assert (req["tuner"], req["lora_rank"], req["distribution"], req["num_gpus"]) == ("qlora", 32, "fsdp", 2)
    assert (req["batch_size"], req["max_length"], req["precision"]) == (2, 1024, "bf16")
    overridden = run_json(app, str(profile), "--batch-size", "1", "--lora-rank", "8")
    assert (overridden["request"]["batch_size"], overridden["request"]["lora_rank"]) == (1, 8)


def test_bad_profile_exits_2(app: typer.Typer, tmp_path: Path) -> None:
    profile = tmp_path / "bad.toml"
    profile.write_text('[tuner]\ntype = "prefix"\n')
    result = runner.invoke(app, ["estimate", str(profile)])
    assert result.exit_code == 2
    assert "tuner" in result.output


def test_the_table_and_json_show_the_timeline(app: typer.Typer, model_dir: Path) -> None:
    """#26: which phase peaks and the terms that make it; the breakdown is that phase's terms. Full
    fine-tuning (fused AdamW: no temporary) at 512 tokens peaks in the steady step."""
    args = ["--model", str(model_dir), "--formula", "--tuner", "full", "--max-length", "512", "--gpu-memory", "80",
            "--host-memory", "64"]
    data = run_json(app, *args)
    assert [p["phase"] for p in data["timeline"]] == ["load", "first_step", "optimizer_step", "steady_step",
                                                      "eval", "save"]
    assert data["peak_phase"] == "steady_step"
    peak = next(p for p in data["timeline"] if p["phase"] == "steady_step")
    assert peak["gpu_total_bytes"] == data["per_device_total_bytes"]
    assert {k: v for k, v in data["breakdown"].items() if v} == peak["gpu_terms"]
    result = runner.invoke(app, ["estimate", *args], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "Timeline: the GPU peaks in steady_step" in result.stdout
    assert "steady_step (peak)" in result.stdout and "Per-device GPU memory at the peak (steady_step)" in result.stdout
