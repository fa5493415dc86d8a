"""The command builder: golden argv + accelerate YAML per shipped profile, and the rules behind them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file

from backend.core.paths import REPO_DIR, SHIPPED_PROFILES_DIR, cache_dir
from backend.hardware.machine import HardwareInfo
from backend.launch.command import build_launch
from backend.profile import LaunchProfile, load_profile
from tests.fakes import CPU_BOX, gpu_box
from tests.runs.helpers import quick_profile
from tests.timing import scaled

GOLDEN_DIR = Path(__file__).parent / "golden"
CPU_PROFILES = {"quickstart", "cpu-ddp-2proc", "cpu-fp16-loss-scale"}
SHIPPED = sorted(p.stem for p in SHIPPED_PROFILES_DIR.glob("*.toml"))


def _hardware(name: str) -> HardwareInfo:
    return CPU_BOX if name in CPU_PROFILES else gpu_box(count=4)


def _normalise(text: str, run_dir: Path, python: str = sys.executable) -> str:
    """Replace machine-specific paths so goldens hold on any checkout and any virtual environment.

    The interpreter goes first: it usually lies inside the repository (`.venv/bin/python3`), and
    replacing the repository first would leave `{REPO}/.venv/bin/python3` in the golden, which
    breaks with any other venv. Longer paths go before the paths they contain."""
    replacements = ((python, "{PYTHON}"), (str(run_dir), "{RUN}"), (str(cache_dir()), "{CACHE}"),
                    (str(REPO_DIR), "{REPO}"))
    for real, token in replacements:
        text = text.replace(real, token)
    return text


def _rendered(plan, run_dir: Path, python: str = sys.executable) -> str:  # noqa: ANN001
    return _normalise(
        "# argv\n" + "\n".join(plan.argv) + "\n# env\n" + json.dumps(plan.env, indent=1, sort_keys=True)
        + "\n# accelerate config\n" + plan.accelerate_yaml()
        + ("# deepspeed\n" + json.dumps(plan.deepspeed_config, indent=1) + "\n" if plan.deepspeed_config else ""),
        run_dir, python,
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_golden_argv_and_accelerate_config(name: str, tmp_path: Path) -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml")
    plan = build_launch(profile, tmp_path / "run", _hardware(name), base_dir=SHIPPED_PROFILES_DIR)
    rendered = _rendered(plan, tmp_path / "run")
    golden = GOLDEN_DIR / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()
    plan.write_configs()
    loaded = load_config_from_file(str(plan.accelerate_config_path))  # accelerate's own loader
    assert loaded.num_processes == profile.distribution.world_size
    assert str(loaded.distributed_type).endswith(plan.accelerate_config["distributed_type"])


def test_goldens_hold_with_an_interpreter_of_another_virtual_environment(tmp_path: Path) -> None:
    """A golden names the interpreter `{PYTHON}`, never a path inside this checkout's `.venv`."""
    for golden in GOLDEN_DIR.glob("*.txt"):
        assert ".venv" not in golden.read_text() and golden.read_text().splitlines()[1] == "{PYTHON}", golden.name
    elsewhere = "/opt/venvs/workbench-elsewhere/bin/python3.12"
    for python in (elsewhere, str(REPO_DIR / ".venv" / "bin" / "python3")):
        plan = build_launch(load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml"), tmp_path / "run", CPU_BOX,
                            base_dir=SHIPPED_PROFILES_DIR, python=python)
        assert _rendered(plan, tmp_path / "run", python) == (GOLDEN_DIR / "quickstart.txt").read_text(), python


def test_every_path_is_absolute_and_swift_4_flags_are_used(tmp_path: Path) -> None:
    plan = build_launch(load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml"), tmp_path, CPU_BOX)
    argv = plan.argv
    value = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("--")}
    for flag in ("--model", "--dataset", "--output_dir", "--external_plugins", "--config_file"):
        assert Path(value[flag]).is_absolute(), flag
    assert value["--tuner_type"] == "lora" and "--train_type" not in argv
    assert (value["--check_model"], value["--add_version"], value["--use_cpu"]) == ("false", "false", "true")
    assert (value["--fp16"], value["--bf16"]) == ("false", "false")  # explicit: swift would turn fp16 on
    assert value["--gradient_accumulation_steps"] == "1"


def test_gpu_run_has_no_use_cpu_and_selects_gpus(tmp_path: Path) -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / "qwen2-1.5b-fsdp-qlora-2gpu.toml")
    plan = build_launch(profile, tmp_path, gpu_box(count=4))
    assert "--use_cpu" not in plan.argv
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert plan.accelerate_config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "Qwen2DecoderLayer"


def test_decoder_layer_is_detected_from_local_config(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    profile = LaunchProfile.model_validate({"model": {"source": str(model)},
                                            "distribution": {"strategy": "fsdp", "nproc_per_node": 2}})
    plan = build_launch(profile, tmp_path / "run", gpu_box())
    assert plan.accelerate_config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"


def test_shell_line_quotes_round_trip(tmp_path: Path) -> None:
    profile = LaunchProfile.model_validate({"model": {"system": "You're a 'careful' assistant; $HOME"}})
    plan = build_launch(profile, tmp_path, CPU_BOX)
    words = shlex.split(plan.shell_line())
    env_words = [w for w in words if "=" in w and w.split("=")[0].isupper()]
    assert words[len(env_words):] == plan.argv


def test_secrets_are_redacted_in_recorded_env(tmp_path: Path) -> None:
    plan = build_launch(LaunchProfile(), tmp_path, CPU_BOX)
    plan.env["HF_TOKEN"] = "hf_secret"
    assert plan.redacted_env()["HF_TOKEN"] == "***"


@pytest.mark.slow
def test_show_prints_a_line_that_trains(tmp_path: Path, tiny_model: Path) -> None:
    """`workbench show` of the quickstart, pasted into a shell, trains the tiny model to a checkpoint (a copy
    with 6 steps: the line is what is proven, not the 318 steps the shipped profile takes)."""
    profile = quick_profile(tmp_path, training={"max_steps": 6, "save_steps": 3})
    run_dir = tmp_path / "pasted"
    shown = subprocess.run([sys.executable, "-m", "backend.cli", "show", str(profile), "--run-dir", str(run_dir)],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    line = shown.stdout.strip().splitlines()[-1]
    assert line.startswith("PYTHONUNBUFFERED=1 ") and "swift.cli.sft" in line
    assert yaml.safe_load((run_dir / "accelerate_config.yaml").read_text())["use_cpu"] is True
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, capture_output=True, timeout=scaled(600))
    checkpoints = sorted((run_dir / "output").glob("checkpoint-*"))
    assert checkpoints and (checkpoints[-1] / "adapter_model.safetensors").is_file()
    assert checkpoints[-1].name == "checkpoint-6"
