"""Golden tests of the FSDP / DeepSpeed / DDP launches of the shipped profiles, as accelerate and torch read them.

Each accelerate YAML is written to disk and read back by accelerate's own loader; then accelerate's
own launch code turns it into what it would start: the launcher, the FSDP_* / ACCELERATE_*
environment the training process receives, and torch elastic's launch config (nodes, processes,
rendezvous). DeepSpeed JSONs are read by accelerate's HfDeepSpeedConfig. Besides the shipped
profiles, each GPU profile is also checked as machine 1 of a two-machine run (FSDP ones with
HYBRID_SHARD, which only makes sense across machines). Regenerate with UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch.distributed.run as torchrun
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import launch as accelerate_launch
from accelerate.utils.deepspeed import HfDeepSpeedConfig

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.hardware.machine import HardwareInfo
from backend.launch.command import build_launch
from backend.launch.validate import errors, validate
from backend.profile import LaunchProfile, load_profile
from tests.fakes import CPU_BOX, gpu_box

GOLDEN_DIR = Path(__file__).parent / "golden"
FIXTURES = Path(__file__).resolve().parents[1] / "estimate" / "fixtures"
MODEL_CONFIGS = {"qwen2": FIXTURES / "qwen2_5_7b", "llama": FIXTURES / "llama2_70b"}
SHIPPED = sorted(p.stem for p in SHIPPED_PROFILES_DIR.glob("*.toml")
                 if load_profile(p).distribution.strategy != "single")
GPU_SHIPPED = [n for n in SHIPPED if load_profile(SHIPPED_PROFILES_DIR / f"{n}.toml").distribution.device != "cpu"]


def _model_dir(profile: LaunchProfile) -> str:
    """A local config.json of the same architecture, so auto-wrap detection runs without the hub."""
    return str(MODEL_CONFIGS["llama" if "llama" in profile.model.source.lower() else "qwen2"])


def _hardware(profile: LaunchProfile) -> HardwareInfo:
    return CPU_BOX if profile.distribution.device == "cpu" else gpu_box(count=profile.distribution.nproc_per_node)


def two_machine_variant(profile: LaunchProfile) -> LaunchProfile:
    variant = profile.model_copy(deep=True)
    d = variant.distribution
    d.num_machines, d.machine_rank, d.main_process_ip, d.main_process_port = 2, 1, "10.0.0.1", 29400
    if d.strategy == "fsdp":
        d.fsdp.sharding_strategy = "HYBRID_SHARD"
    return variant


def accelerate_view(config_file: Path, argv: list[str]) -> dict[str, Any]:
    """What accelerate's own launch code makes of our config file and launcher flags."""
    args = launch_command_parser().parse_args(argv[argv.index("accelerate.commands.launch") + 1:])
    _validate_launch_command(args)
    launcher = ("deepspeed" if args.use_deepspeed else "multi_gpu (torchrun)" if args.use_fsdp or args.multi_gpu
                else "simple")
    view: dict[str, Any] = {"launcher": launcher}
    if launcher == "simple":
        return view
    env = accelerate_launch.prepare_multi_gpu_env(args)
    wanted = ("FSDP_", "ACCELERATE_USE", "ACCELERATE_MIXED")
    view["env"] = {k: v for k, v in sorted(env.items()) if k.startswith(wanted)}
    elastic_args = accelerate_launch._filter_args(
        args, torchrun.get_args_parser(),
        ["--training_script", args.training_script, "--training_script_args", args.training_script_args])
    config, _, script_args = torchrun.config_from_args(elastic_args)
    view["torch_elastic"] = {
        "nodes": [config.min_nodes, config.max_nodes], "nproc_per_node": config.nproc_per_node,
        "rdzv_backend": config.rdzv_backend, "rdzv_endpoint": config.rdzv_endpoint,
        "rdzv_configs": dict(config.rdzv_configs), "max_restarts": config.max_restarts,
        "runs": script_args[1:3],
    }
    return view


def deepspeed_view(path: Path) -> dict[str, Any]:
    ds = HfDeepSpeedConfig(str(path))
    return {"stage": ds.get_value("zero_optimization.stage"), "is_zero3": ds.is_zero3(), "is_offload": ds.is_offload(),
            "offload_optimizer": ds.get_value("zero_optimization.offload_optimizer.device"),
            "offload_param": ds.get_value("zero_optimization.offload_param.device"),
            "bf16": ds.get_value("bf16.enabled"), "fp16": ds.get_value("fp16.enabled")}


def render(profile: LaunchProfile, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    plan = build_launch(profile, run_dir, _hardware(profile), model_path=_model_dir(profile))
    plan.write_configs()
    loaded = load_config_from_file(str(plan.accelerate_config_path))  # accelerate's own loader
    # the port check belongs to the launch on a real machine, not to the translation tested here
    monkeypatch.setattr(accelerate_launch, "is_port_in_use", lambda port: False)
    view: dict[str, Any] = {
        "accelerate_config": {
            "distributed_type": str(loaded.distributed_type), "mixed_precision": str(loaded.mixed_precision),
            "num_processes": loaded.num_processes, "num_machines": loaded.num_machines,
            "machine_rank": loaded.machine_rank, "use_cpu": loaded.use_cpu, "fsdp_config": loaded.fsdp_config,
        },
        "accelerate_launch": accelerate_view(plan.accelerate_config_path, plan.argv),
    }
    if plan.deepspeed_config_path:
        view["deepspeed"] = deepspeed_view(plan.deepspeed_config_path)
        view["swift_deepspeed_flag"] = "--deepspeed" in plan.argv
    return yaml.safe_dump(view, sort_keys=False)


def _check_golden(name: str, text: str) -> None:
    golden = GOLDEN_DIR / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"no golden for {name}; run with UPDATE_GOLDEN=1 and review the file"
    assert text == golden.read_text()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_launch_as_accelerate_reads_it(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml")
    text = render(profile, tmp_path / "run", monkeypatch)
    _check_golden(name, text)
    view = yaml.safe_load(text)
    d = profile.distribution
    assert view["accelerate_config"]["num_processes"] == d.world_size
    if d.strategy == "fsdp":
        env = view["accelerate_launch"]["env"]
        assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == str(d.fsdp.version)
        assert env["FSDP_SHARDING_STRATEGY"] == d.fsdp.sharding_strategy
        assert env["FSDP_OFFLOAD_PARAMS"] == str(d.fsdp.cpu_offload).lower()
        assert env["FSDP_TRANSFORMER_CLS_TO_WRAP"].endswith("DecoderLayer")
    if d.strategy == "deepspeed":
        assert view["deepspeed"]["stage"] == d.deepspeed.stage and view["swift_deepspeed_flag"]


@pytest.mark.parametrize("name", GPU_SHIPPED)
def test_gpu_profile_as_machine_one_of_two(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = two_machine_variant(load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml"))
    # (whether deepspeed is installed is a fact of this machine, not of the profile)
    assert [p for p in errors(validate(profile, _hardware(profile))) if "not installed" not in p.message] == []
    text = render(profile, tmp_path / "run", monkeypatch)
    _check_golden(f"{name}.machine1of2", text)
    elastic = yaml.safe_load(text)["accelerate_launch"]["torch_elastic"]
    assert elastic["nodes"] == [2, 2] and elastic["rdzv_endpoint"] == "10.0.0.1:29400"
    assert elastic["rdzv_configs"]["rank"] == 1
    assert elastic["nproc_per_node"] == profile.distribution.nproc_per_node


def test_every_fsdp_key_is_an_accelerate_launch_option(tmp_path: Path) -> None:
    """A misspelt key would be silently ignored by accelerate; each must be one of its launch flags."""
    options = {action.dest for action in launch_command_parser()._actions}
    for name in SHIPPED:
        profile = load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml")
        for version in (1, 2):
            profile.distribution.fsdp.version = version
            plan = build_launch(profile, tmp_path / name, _hardware(profile), model_path=_model_dir(profile))
            for key in plan.accelerate_config.get("fsdp_config", {}):
                assert key in options, f"{name}: fsdp_config key {key} is not an accelerate launch option"
