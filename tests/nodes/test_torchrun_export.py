"""`workbench export torchrun`: the script's flags, swift's FSDP file as the Trainer reads it, and a real
two-machine run on loopback started from the exported script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.launch.nodes import free_port
from backend.launchers.torchrun import export_torchrun, swift_fsdp_config
from backend.profile import load_profile
from tests.fakes import CPU_BOX, gpu_box
from tests.nodes.nodes_helpers import (
    SHELLCHECK_MISSING,
    kill_group,
    losses,
    shellcheck_binary,
    two_machine_profile,
)
from tests.timing import scaled

QWEN2_CONFIG = Path(__file__).resolve().parents[1] / "estimate" / "fixtures" / "qwen2_5_7b"

app = full_app()


def test_two_machine_script_takes_the_rank_from_node_rank(tmp_path: Path) -> None:
    profile = load_profile(two_machine_profile(tmp_path, port=29601))
    script = export_torchrun(profile, tmp_path / "run", CPU_BOX).script
    assert 'NODE_RANK="${NODE_RANK:?' in script
    assert ('-m torch.distributed.run --nnodes=2 --nproc_per_node=1 --node_rank "$NODE_RANK" '
            '--master_addr=127.0.0.1 --master_port=29601 -m swift.cli.sft') in script
    assert "--use_cpu true" in script and script.rstrip().endswith('"$@"')


def test_c10d_and_single_machine_scripts(tmp_path: Path) -> None:
    profile = load_profile(two_machine_profile(tmp_path, port=29602))
    profile.distribution.rdzv_backend = "c10d"
    c10d = export_torchrun(profile, tmp_path / "a", CPU_BOX).script
    assert "--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29602 --rdzv_id=two-machines" in c10d
    assert "NODE_RANK" not in c10d
    single = export_torchrun(load_profile(SHIPPED_PROFILES_DIR / "cpu-ddp-2proc.toml"), tmp_path / "b", CPU_BOX)
    assert "--standalone --nproc_per_node=2 -m swift.cli.sft" in single.script


@pytest.mark.skipif(shellcheck_binary() is None, reason=SHELLCHECK_MISSING)
def test_exported_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    runner = CliRunner()
    profiles = {"multi": str(two_machine_profile(tmp_path, port=29603)), "fsdp": "qwen2-1.5b-fsdp-qlora-2gpu"}
    for name, profile in profiles.items():
        out = tmp_path / f"{name}.sh"
        result = runner.invoke(app, ["export", "torchrun", profile, "-o", str(out), "--run-dir", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        check = subprocess.run([shellcheck_binary(), "--severity=style", str(out)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


def test_fsdp_file_is_read_by_the_trainer_as_the_profile_says(tmp_path: Path) -> None:
    """swift hands --fsdp FILE to the HF Trainer; its own argument parsing must see our settings."""
    from transformers import TrainingArguments

    profile = load_profile(SHIPPED_PROFILES_DIR / "qwen2-1.5b-fsdp-qlora-2gpu.toml")
    exported = export_torchrun(profile, tmp_path / "run", gpu_box(2))
    assert "--fsdp" in exported.script and (tmp_path / "run" / "fsdp_config.json").is_file()
    written = json.loads((tmp_path / "run" / "fsdp_config.json").read_text())
    args = TrainingArguments(output_dir=str(tmp_path / "out"), fsdp=written["fsdp"],
                             fsdp_config=dict(written["fsdp_config"]), use_cpu=True)
    plugin = args.fsdp_plugin_args
    f = profile.distribution.fsdp
    assert plugin["fsdp_version"] == f.version and plugin["cpu_offload"] == f.cpu_offload
    assert plugin["transformer_cls_names_to_wrap"] == f.transformer_layer_cls_to_wrap
    assert plugin["reshard_after_forward"] == "full_shard" and plugin["state_dict_type"] == f.state_dict_type
    assert plugin["use_orig_params"] is f.use_orig_params


def test_fsdp2_takes_only_the_strategies_it_has() -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / "qwen2-1.5b-fsdp-qlora-2gpu.toml")
    profile.distribution.fsdp.version = 2
    assert swift_fsdp_config(profile, str(QWEN2_CONFIG))["fsdp_config"]["reshard_after_forward"] is True
    profile.distribution.fsdp.sharding_strategy = "HYBRID_SHARD"
    with pytest.raises(ValueError, match="FSDP2 has no HYBRID_SHARD"):
        swift_fsdp_config(profile, str(QWEN2_CONFIG))


@pytest.mark.slow
def test_exported_script_runs_two_machines_on_loopback(tmp_path: Path, tiny_model: Path) -> None:
    profile = load_profile(two_machine_profile(tmp_path, port=free_port()))
    script = tmp_path / "torchrun.sh"
    script.write_text(export_torchrun(profile, tmp_path / "run", CPU_BOX).script)
    processes = []
    try:
        for rank in (0, 1):
            log = open(tmp_path / f"machine{rank}.log", "wb")
            processes.append(subprocess.Popen(["bash", str(script)], env={**os.environ, "NODE_RANK": str(rank)},
                                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True))
        codes = [p.wait(timeout=scaled(240)) for p in processes]
    finally:
        for process in processes:
            kill_group(process)
    assert codes == [0, 0], (tmp_path / "machine1.log").read_text(errors="replace")[-3000:]
    events = tmp_path / "run" / "events.jsonl"
    assert len(losses(events, 0)) == 6 and losses(events, 0) == losses(events, 1)
