"""A launch profile (backend/profile.py) turned into planner inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from estimate_helpers import FIXTURES

from backend.estimate import ConfigError, ModelShape
from backend.estimate.from_profile import config_dir_for, request_from_profile, shape_from_profile
from backend.models.shape_formula import shape_from_config_dir
from backend.profile import LaunchProfile, parse_profile


def profile(text: str) -> LaunchProfile:
    return parse_profile(text)


def test_defaults_map_to_a_single_gpu_lora_in_swifts_precision(qwen7b: ModelShape) -> None:
    from backend.launch.swift_schema import require_schema

    require_schema()  # swift's schema read (once per test session): the forecast never asks it itself
    req = request_from_profile(LaunchProfile(), qwen7b, longest_row=700)
    assert (req.tuner, req.lora_rank, req.lora_dropout, req.target_modules) == ("lora", 8, 0.05, ("all-linear",))
    # max_length unset: swift pads each batch to its longest row (#26), not the model's 131072
    assert (req.distribution, req.num_gpus, req.batch_size, req.max_length) == ("single", 1, 1, 700)
    # precision unset on a GPU: swift's rule (ModelArguments._init_mixed_precision) for a bf16 model
    assert req.precision == "bf16" and req.torch_dtype == "bf16"  # torch_dtype auto -> config.json
    assert "swift trains a bfloat16 model in bf16 (its own rule)" in " ".join(req.notes)
    fp32_model = request_from_profile(profile('[model]\ntorch_dtype = "float32"\n'), qwen7b)
    assert fp32_model.precision == "fp16"  # swift 4.6 turns fp16 on for an fp32 model
    on_cpu = request_from_profile(profile('[distribution]\ndevice = "cpu"\n'), qwen7b)
    assert on_cpu.precision == "fp32"  # the builder passes --bf16 false --fp16 false there


def test_unset_precision_before_swift_was_asked_says_so(qwen7b: ModelShape, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    req = request_from_profile(LaunchProfile(), qwen7b)
    assert req.precision == "fp32"
    assert "this forecast assumes fp32 until swift's schema has been read" in " ".join(req.notes)


def test_deepspeed_and_extra_args(qwen7b: ModelShape) -> None:
    p = profile('''
[precision]
bf16 = true
[distribution]
strategy = "deepspeed"
nproc_per_node = 4
num_machines = 2
[distribution.deepspeed]
stage = 3
offload_optimizer = true
[extra_swift_args]
attn_impl = "flash_attn"
use_liger_kernel = true
optim = "adamw_torch"
''')
    req = request_from_profile(p, qwen7b)
    assert (req.zero_stage, req.offload, req.offload_param) == (3, True, False)
    assert (req.num_gpus, req.num_nodes, req.world_size) == (4, 2, 8)
    assert (req.attn_implementation, req.liger_kernel, req.optimizer) == ("flash_attention_2", True, "adamw_foreach")


def test_fsdp_block(qwen7b: ModelShape) -> None:
    p = profile('''
[tuner]
type = "qlora"
quant_bits = 8
[distribution]
strategy = "fsdp"
nproc_per_node = 2
[distribution.fsdp]
sharding_strategy = "HYBRID_SHARD"
cpu_offload = true
activation_checkpointing = true
cpu_ram_efficient_loading = false
[training]
gradient_checkpointing = false
''')
    req = request_from_profile(p, qwen7b, gpu_memory_bytes=123)
    assert (req.fsdp_strategy, req.offload, req.quant_bits) == ("HYBRID_SHARD", True, 8)
    assert req.gradient_checkpointing  # FSDP's own activation checkpointing counts
    assert req.fsdp_cpu_ram_efficient_loading is False and req.gpu_memory_bytes == 123


def test_shape_from_a_local_folder(tmp_path: Path) -> None:
    p = LaunchProfile.model_validate({"model": {"source": str(FIXTURES / "llama2_7b")}})
    assert shape_from_profile(p).total_params == 6_738_415_616


def test_unbuilt_builtin_model_uses_its_spec(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    shape = shape_from_profile(LaunchProfile())  # builtin:tiny-qwen2, not built in this empty cache
    assert (shape.hidden_size, shape.num_layers, shape.tie_word_embeddings) == (64, 2, True)


def test_hub_id_without_local_copy_is_a_clear_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    with pytest.raises(ConfigError, match="pass --model DIR"):
        config_dir_for("Qwen/Qwen2.5-7B-Instruct")


def test_hub_id_found_in_the_hugging_face_cache(monkeypatch, tmp_path: Path) -> None:
    snapshot = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((FIXTURES / "qwen2_5_7b" / "config.json").read_text())
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")  # huggingface_hub follows refs/main
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert config_dir_for("Qwen/Qwen2.5-7B-Instruct") == snapshot


def test_hub_id_found_in_the_modelscope_cache_under_its_own_naming(monkeypatch, tmp_path: Path) -> None:
    """ModelScope stores dots as '___'; the picker and the planner find the same folder."""
    folder = tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-7B-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((FIXTURES / "qwen2_5_7b" / "config.json").read_text())
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    assert config_dir_for("Qwen/Qwen2.5-7B-Instruct") == folder
    from backend.models.registry import describe_source

    assert describe_source("Qwen/Qwen2.5-7B-Instruct").path == folder
    p = LaunchProfile.model_validate({"model": {"source": "Qwen/Qwen2.5-7B-Instruct"}})
    assert shape_from_profile(p).total_params == 7_615_616_512


def test_a_runs_forecast_for_a_cached_hub_id_is_a_forecast(monkeypatch, tmp_path: Path) -> None:
    """The run manager passes what --model got (a hub id); the forecast finds its cached config."""
    from backend.estimate.forecast import forecast_for_profile

    repo = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-7B-Instruct"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text((FIXTURES / "qwen2_5_7b" / "config.json").read_text())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    p = LaunchProfile.model_validate({"model": {"source": "Qwen/Qwen2.5-7B-Instruct"}})
    forecast = forecast_for_profile(p, "Qwen/Qwen2.5-7B-Instruct")
    assert "error" not in forecast and forecast["parameters"]["total"] == 7_615_616_512


# ---------------------------------------------------------------- max_length unset (#26)

UNSET_MAX_LENGTH = '''
[model]
source = "{model}"
[precision]
bf16 = true
[data]
train = ["{data}"]
'''


def _unset_profile(tmp_path: Path) -> LaunchProfile:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    return profile(UNSET_MAX_LENGTH.format(model=FIXTURES / "llama3_1_8b", data=data))


def test_unset_max_length_is_an_assumed_2048_tokens_not_the_whole_context(tmp_path: Path) -> None:
    """Llama-3.1-8B's config says 131,072 positions; swift pads each batch to its longest row, so with
    the data's lengths unknown the forecast assumes 2,048 tokens and says so. At 131,072 tokens LoRA on
    an 80 GiB GPU was 'does not fit' (306.7 GiB, logits alone 187.9); at 2,048 it fits."""
    from backend.estimate import estimate

    shape = shape_from_config_dir(FIXTURES / "llama3_1_8b")
    req = request_from_profile(_unset_profile(tmp_path), shape, gpu_memory_bytes=80 * 2**30, base_dir=tmp_path)
    assert req.max_length == 2048
    assert "max_length unset: assumed 2,048 tokens per row" in " ".join(req.notes)
    fit = estimate(shape, req).fit
    assert fit is not None and fit.status == "fits"


def test_unset_max_length_follows_the_datas_longest_row_from_swifts_report(tmp_path: Path) -> None:
    """When swift's report on the profile's data is known (here: remembered as the Data tab would), the
    forecast uses its longest row: 3,000 tokens."""
    from backend.data.swift_view import remember, request_for

    p = _unset_profile(tmp_path)
    remember(request_for(p, tmp_path, build_model=False), {"token_lengths": {"max": 3000, "p50": 12}})
    req = request_from_profile(p, shape_from_config_dir(FIXTURES / "llama3_1_8b"), base_dir=tmp_path)
    assert req.max_length == 3000
    assert "the data's longest is 3,000 tokens (swift's report)" in " ".join(req.notes)
