"""FSDP settings (#23): the decoder-layer class FSDP wraps comes from transformers (the model_shape oracle), the
hand table only when the oracle has no answer; and the profile's [distribution.fsdp] is mapped once, written for
accelerate's config file and for swift's --fsdp file alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.launch import launcher_config
from backend.launch.launcher_config import detect_decoder_layer, fsdp_block
from backend.launchers.torchrun import swift_fsdp_config
from backend.models.shape_exact import exact_shape
from backend.profile import LaunchProfile


def _fsdp_profile(model: Path, **fsdp: object) -> LaunchProfile:
    return LaunchProfile.model_validate({"model": {"source": str(model)},
                                         "distribution": {"strategy": "fsdp", "nproc_per_node": 2, "fsdp": fsdp}})


def test_the_tiny_models_wrap_class_is_the_oracles_not_the_tables(tiny_model: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert exact_shape(tiny_model).exact  # transformers answered (one child process; cached from then on)
    monkeypatch.setattr(launcher_config, "DECODER_LAYER_CLASSES", {"Qwen2ForCausalLM": "NotTheOraclesAnswer"})
    assert detect_decoder_layer(str(tiny_model)) == "Qwen2DecoderLayer"
    block = fsdp_block(_fsdp_profile(tiny_model), str(tiny_model))
    assert block["fsdp_transformer_layer_cls_to_wrap"] == "Qwen2DecoderLayer"


def test_a_config_the_oracle_cannot_size_falls_back_to_the_table(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert detect_decoder_layer(str(tmp_path)) == "LlamaDecoderLayer"


def test_accelerate_and_swift_get_the_same_fsdp1_settings(tmp_path: Path) -> None:
    profile = _fsdp_profile(tmp_path, version=1, sharding_strategy="SHARD_GRAD_OP", cpu_offload=True,
                            transformer_layer_cls_to_wrap="MyBlock", backward_prefetch="BACKWARD_POST",
                            forward_prefetch=True, use_orig_params=False, sync_module_states=True,
                            activation_checkpointing=True, state_dict_type="FULL_STATE_DICT",
                            cpu_ram_efficient_loading=False)
    assert fsdp_block(profile) == {
        "fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_offload_params": True, "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_activation_checkpointing": True,
        "fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_backward_prefetch": "BACKWARD_POST",
        "fsdp_forward_prefetch": True, "fsdp_sync_module_states": True, "fsdp_use_orig_params": False,
        "fsdp_transformer_layer_cls_to_wrap": "MyBlock"}
    assert swift_fsdp_config(profile, None) == {"fsdp": "shard_grad_op auto_wrap offload", "fsdp_config": {
        "fsdp_version": 1, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "cpu_ram_efficient_loading": False,
        "cpu_offload": True, "state_dict_type": "FULL_STATE_DICT", "activation_checkpointing": True,
        "reshard_after_forward": "shard_grad_op", "backward_prefetch": "BACKWARD_POST", "forward_prefetch": True,
        "sync_module_states": True, "use_orig_params": False, "transformer_layer_cls_to_wrap": ["MyBlock"]}}


def test_accelerate_and_swift_get_the_same_fsdp2_settings(tmp_path: Path) -> None:
    profile = _fsdp_profile(tmp_path, version=2, sharding_strategy="FULL_SHARD", auto_wrap_policy="SIZE_BASED_WRAP",
                            min_num_params=1000, cpu_offload=False, state_dict_type="SHARDED_STATE_DICT",
                            activation_checkpointing=False, cpu_ram_efficient_loading=True)
    assert fsdp_block(profile) == {
        "fsdp_version": 2, "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": False, "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_activation_checkpointing": False, "fsdp_reshard_after_forward": True, "fsdp_min_num_params": 1000}
    assert swift_fsdp_config(profile, None)["fsdp_config"] == {
        "fsdp_version": 2, "auto_wrap_policy": "SIZE_BASED_WRAP", "cpu_ram_efficient_loading": True,
        "cpu_offload": False, "state_dict_type": "SHARDED_STATE_DICT", "activation_checkpointing": False,
        "reshard_after_forward": True, "min_num_params": 1000}
