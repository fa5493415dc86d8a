"""`workbench import` keeps what a script pinned (#35): a flag equal to today's default (`--lora_rank 8
--lora_alpha 32 --target_modules all-linear`) is written into the profile and named in the report, so that a
later swift with other defaults trains the same run. Reads swift's schema (a child the first time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.profile import load_profile
from tests.faults import helpers as h

SCRIPT = ("swift sft --model /models/m --model_type qwen2 --template qwen --dataset /data/d.jsonl --tuner_type lora "
          "--lora_rank 8 --lora_alpha 32 --target_modules all-linear --learning_rate 1e-4\n")


@pytest.mark.slow
def test_flags_equal_to_the_default_are_kept_and_named(tmp_path: Path) -> None:
    script, output = tmp_path / "train.sh", tmp_path / "imported.toml"
    script.write_text(SCRIPT)
    result = h.cli("import", str(script), "-o", str(output))
    said = " ".join(result.output.split())
    assert result.exit_code == 0, said
    written = output.read_text()
    assert "[tuner]\ntype = \"lora\"\nlora_rank = 8\nlora_alpha = 32\ntarget_modules = [\n    \"all-linear\",\n]\n" \
        in written, written
    assert ("note: tuner.lora_rank, tuner.lora_alpha, tuner.target_modules: equal to the default with ms-swift "
            in said), said
    assert "kept so that a later swift does not change them" in said
    assert {"lora_rank", "lora_alpha", "target_modules"} <= load_profile(output).tuner.model_fields_set


# ms-swift's FSDP2 example config, with a few of accelerate's keys set to what the workbench does not write
FSDP2 = {"compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": "FSDP", "downcast_bf16": "no",
         "enable_cpu_affinity": True, "dynamo_config": {"dynamo_backend": "INDUCTOR"},
         "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": True,
                         "fsdp_reshard_after_forward": True, "fsdp_state_dict_type": "FULL_STATE_DICT",
                         "fsdp_activation_checkpointing": True, "fsdp_version": 2},
         "machine_rank": 0, "main_training_function": "main", "mixed_precision": "bf16", "num_machines": 1,
         "num_processes": 2, "rdzv_backend": "c10d", "same_network": True, "tpu_env": [], "tpu_use_cluster": False,
         "tpu_use_sudo": False, "use_cpu": False}


@pytest.mark.slow
def test_every_accelerate_key_not_carried_is_named(tmp_path: Path) -> None:
    (tmp_path / "fsdp2.json").write_text(json.dumps(FSDP2))
    script, output = tmp_path / "train.sh", tmp_path / "imported.toml"
    script.write_text("accelerate launch --config_file ./fsdp2.json swift/cli/sft.py --model /models/m "
                      "--model_type qwen2 --template qwen --dataset /data/d.jsonl --tuner_type lora\n")
    result = h.cli("import", str(script), "-o", str(output))
    said = " ".join(result.output.split())
    assert result.exit_code == 0, said
    assert ("note: accelerate settings not carried (the workbench's accelerate config writes its own): "
            "dynamo_config = {'dynamo_backend': 'INDUCTOR'}, enable_cpu_affinity = True") in said, said
    assert "note: accelerate fsdp_config fsdp_reshard_after_forward not carried" in said
    distribution = load_profile(output).distribution
    assert distribution.rdzv_backend == "c10d"  # carried: the profile has the key
    assert distribution.fsdp.cpu_ram_efficient_loading is True and distribution.fsdp.version == 2
