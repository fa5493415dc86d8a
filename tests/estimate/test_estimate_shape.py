"""ModelShape: reading config.json, and parameter counts computed from shapes alone.

References for the counts:
* Qwen2.5-7B model card: 7.61B parameters (7.62B rounded up), 6.53B non-embedding;
  PEFT prints "all params: 7,635,801,600" with 20,185,088 LoRA parameters attached, so the
  base model has exactly 7,615,616,512.
* Llama-2-7b-hf: PEFT prints "trainable params: 4,194,304 || all params: 6,742,609,920"
  (r=8 on q_proj/v_proj), so the base model has exactly 6,738,415,616.
* Llama-2-70b-hf: 68.98B (the safetensors index's total_size / 2 bytes).
* Qwen2.5-0.5B model card: 0.49B parameters, 0.36B non-embedding (tied embeddings).
* Mistral-7B-v0.1: 7,241,732,096. Qwen3-8B model card: 8.2B, 6.95B non-embedding.
"""

from __future__ import annotations

import json

import pytest
from estimate_helpers import FIXTURES, load_shape, rel_err

from backend.estimate import ConfigError, ModelShape
from backend.models.shape_formula import shape_from_config, shape_from_config_dir


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("qwen2_5_7b", 7.62e9),
        ("llama2_7b", 6.74e9),
        ("llama2_70b", 68.98e9),
        ("mistral_7b", 7.24e9),
        ("qwen3_8b", 8.19e9),
    ],
)
def test_parameter_count_within_half_a_percent_of_published(name: str, published: float) -> None:
    assert rel_err(load_shape(name).total_params, published) < 0.005


def test_small_model_matches_its_card_to_the_digits_given() -> None:
    assert round(load_shape("qwen2_5_0_5b").total_params / 1e9, 2) == 0.49  # card: "0.49B"


def test_exact_counts_match_peft_printouts(qwen7b: ModelShape, llama7b: ModelShape) -> None:
    assert qwen7b.total_params == 7_635_801_600 - 20_185_088
    assert llama7b.total_params == 6_742_609_920 - 4_194_304


def test_non_embedding_counts_match_model_cards() -> None:
    assert rel_err(load_shape("qwen2_5_7b").non_embedding_params, 6.53e9) < 0.005
    assert rel_err(load_shape("qwen2_5_0_5b").non_embedding_params, 0.36e9) < 0.01
    assert rel_err(load_shape("qwen3_8b").non_embedding_params, 6.95e9) < 0.005


def test_gqa_sizes(qwen7b: ModelShape, llama70b: ModelShape, llama7b: ModelShape) -> None:
    assert (qwen7b.q_dim, qwen7b.kv_dim) == (3584, 512)  # 28 heads, 4 kv heads, head_dim 128
    assert (llama70b.q_dim, llama70b.kv_dim) == (8192, 1024)
    assert llama7b.kv_dim == llama7b.q_dim == 4096  # no GQA in Llama-2-7B
    k_proj = next(s for s in llama70b.linear_layers() if s.name == "k_proj")
    assert (k_proj.in_features, k_proj.out_features) == (8192, 1024)


def test_qwen2_has_qkv_bias_llama_does_not(qwen7b: ModelShape, llama7b: ModelShape) -> None:
    assert qwen7b.bias_params_per_layer == 3584 + 512 + 512
    assert llama7b.bias_params_per_layer == 0


def test_tied_embeddings_have_no_lm_head() -> None:
    small = load_shape("qwen2_5_0_5b")
    assert small.tie_word_embeddings
    assert small.lm_head_params == 0
    assert small.total_params == 494_032_768


def test_qwen3_reads_head_dim_and_qk_norms() -> None:
    shape = load_shape("qwen3_8b")
    assert shape.head_dim == 128 and shape.qk_norm
    assert shape.norm_params_per_layer == 2 * 4096 + 2 * 128


def test_qlora_split_keeps_embeddings_norms_and_biases_dense(qwen7b: ModelShape) -> None:
    dense = qwen7b.embedding_params + qwen7b.lm_head_params + qwen7b.final_norm_params + qwen7b.num_layers * (
        qwen7b.norm_params_per_layer + qwen7b.bias_params_per_layer)
    assert qwen7b.dense_kept_params == dense
    assert qwen7b.linear_weight_params + qwen7b.dense_kept_params == qwen7b.total_params


def test_largest_module_is_the_embedding_for_large_vocabularies(qwen7b: ModelShape, llama70b: ModelShape) -> None:
    assert qwen7b.largest_module_params == 152064 * 3584
    assert llama70b.largest_module_params == 32000 * 8192  # still the embedding (262M > 235M down_proj)


def test_reads_config_file_path_and_dtype(tmp_path) -> None:
    shape = shape_from_config_dir(FIXTURES / "llama2_7b" / "config.json")
    assert shape.torch_dtype == "fp16"
    assert shape.architecture == "LlamaForCausalLM" and shape.family_known


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size",
                                 "num_attention_heads"])
def test_missing_key_is_named(key: str) -> None:
    config = json.loads((FIXTURES / "llama2_7b" / "config.json").read_text())
    del config[key]
    with pytest.raises(ConfigError, match=key):
        shape_from_config(config)


def test_missing_config_json_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no config.json"):
        shape_from_config_dir(tmp_path)


def test_invalid_json_is_a_clear_error(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        shape_from_config_dir(tmp_path)


def test_mixture_of_experts_formula_is_an_estimate_with_every_expert() -> None:
    shape = shape_from_config({
        "model_type": "somemoe", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 2,
        "intermediate_size": 16, "vocab_size": 10, "num_local_experts": 4, "num_experts_per_tok": 2})
    assert shape.is_moe and not shape.exact and shape.count_label.startswith("estimated, not exact")
    # by hand: 2 layers x (attention 4*8*8 + norms 2*8 + 4 experts x 3*8*16 + router 8*4) + 2 x 10*8 + 8
    assert shape.total_params == 2 * (256 + 16 + 1536 + 32) + 160 + 8
    assert shape.active_params == shape.total_params - 2 * 2 * 3 * 8 * 16  # two idle experts per layer


def test_nested_text_config_and_unknown_family() -> None:
    shape = shape_from_config({
        "model_type": "some_vlm",
        "text_config": {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                        "intermediate_size": 128, "vocab_size": 100},
    })
    assert shape.hidden_size == 64 and not shape.family_known
