"""Exact shapes from transformers itself (the `model_shape` oracle) against hand-written counts.

The config.json files under fixtures/ are typed by hand from the published configs. Expected
counts are worked out by hand from the shapes (and agree with the model cards):

* gemma-2-2b: 26 x (q 2304x2048 + k,v 2304x1024 + o 2048x2304 + 3 x 2304x9216 + 4 norms x 2304)
  + 256000 x 2304 embeddings (tied: the config omits `tie_word_embeddings`, Gemma2Config
  defaults it to True) + 2304 = 2,614,341,888 ("2.61 B", not the 3.2 B an untied count gives).
* Phi-3-mini LoRA r=8 all-linear, fused qkv_proj 3072->9216, o_proj, gate_up_proj 3072->16384,
  down_proj 8192->3072: 32 x 8 x (12288 + 6144 + 19456 + 11264) = 12,582,912 ("12.6 M";
  unfused q/k/v/gate/up would be 14,942,208).
* GPT-NeoX-20B: 44 x 453,064,704 + 2 x 50432 x 6144 + 2 x 6144 = 20,554,567,680 ("20.6 B").
* Falcon-7B: 32 x 207,070,080 + 65024 x 4544 (lm_head tied by FalconConfig's default) + 2 x 4544
  = 6,921,720,704 (the hub's "7.22 B" counts the stored copy of the tied lm_head).
* Mixtral-8x7B: 46,702,792,704 ("46.7 B"); LoRA r=8 on q/k/v/o: 32 x 8 x 26624 = 6,815,744.
* Qwen1.5-MoE-A2.7B: 24 x 570,560,512 + 2 x 151936 x 2048 + 2048 = 14,315,784,192 ("14.3 B").
* DeepSeek-V2-Lite (MLA, 1 dense + 26 MoE layers): 81,007,104 + 26 x 584,847,872
  + 2 x 102400 x 2048 + 2048 = 15,706,484,224 ("15.7 B").
* DBRX: 40 x 3,259,084,800 + 2 x 100352 x 6144 + 6144 = 131,596,523,520 ("132 B").
* Llama-3.1-8B 8,030,261,248; Qwen2.5-7B 7,615,616,512; Mistral-7B 7,241,732,096 (PEFT printouts).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from estimate_helpers import FIXTURES

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.models.shape_exact import LIBRARIES, QUESTION, cached_shape, exact_shape, shape_from
from backend.models.shape_formula import shape_from_config
from backend.oracle import ask
from tests.timing import scaled

HAND = {
    "gemma2_2b": 2_614_341_888,
    "phi3_mini": 3_821_079_552,
    "gpt_neox_20b": 20_554_567_680,
    "falcon_7b": 6_921_720_704,
    "mixtral_8x7b": 46_702_792_704,
    "qwen1_5_moe_a2_7b": 14_315_784_192,
    "deepseek_v2_lite": 15_706_484_224,
    "dbrx_base": 131_596_523_520,
    "llama3_1_8b": 8_030_261_248,
    "qwen2_5_7b": 7_615_616_512,
    "mistral_7b": 7_241_732_096,
    "qwen3_8b": 8_190_735_360,
}


def _config(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "config.json").read_text())


@pytest.fixture(scope="session")
def answers() -> dict[str, dict[str, Any]]:
    """Every fixture asked in one child process (cached for the session's later asks)."""
    payload = {"configs": {name: _config(name) for name in HAND},
               "lora": [{"r": 8, "target_modules": "all-linear"}]}
    return ask(QUESTION, payload, libraries=LIBRARIES, timeout=scaled(600))["answers"]


def exact(answers: dict[str, dict[str, Any]], name: str) -> ModelShape:
    answer = answers[name]
    # transformers builds every one of these architectures: an unknown answer is a failure, never a skip
    assert answer.get("known"), f"{name}: transformers could not build the model: {answer.get('reason')}"
    return shape_from(_config(name), answer)


@pytest.mark.parametrize("name", sorted(HAND))
def test_parameter_count_from_transformers_matches_the_hand_count(answers: dict, name: str) -> None:
    shape = exact(answers, name)
    assert shape.exact and shape.count_label == "exact (transformers)"
    assert shape.total_params == HAND[name]


def test_gemma2_ties_embeddings_by_its_config_class_default(answers: dict) -> None:
    config = _config("gemma2_2b")
    assert "tie_word_embeddings" not in config
    shape = exact(answers, "gemma2_2b")
    assert shape.tie_word_embeddings and shape.lm_head_params == 0
    assert exact(answers, "falcon_7b").tie_word_embeddings  # FalconConfig defaults to tied too
    assert not exact(answers, "phi3_mini").tie_word_embeddings


def test_phi3_fused_projections_and_peft_lora_count(answers: dict) -> None:
    shape = exact(answers, "phi3_mini")
    assert set(shape.fused_projections) == {"qkv_proj", "gate_up_proj"}
    qkv = next(s for s in shape.linear_layers() if s.name == "qkv_proj")
    assert (qkv.in_features, qkv.out_features) == (3072, 9216)
    assert shape.lora_params(8, ("all-linear",)) == 12_582_912  # PEFT's own count, from the oracle
    peft = answers["phi3_mini"]["peft"][0]
    assert peft["trainable"] == 12_582_912
    assert shape.lora_params(16, ("all-linear",)) == 2 * 12_582_912


@pytest.mark.parametrize("name", ["gemma2_2b", "phi3_mini", "gpt_neox_20b", "falcon_7b", "llama3_1_8b",
                                  "qwen2_5_7b", "mistral_7b", "qwen3_8b", "mixtral_8x7b"])
def test_lora_formula_over_the_linear_layers_equals_peft(answers: dict, name: str) -> None:
    """r * (in + out) over every linear transformers built == PEFT's trainable count."""
    shape = exact(answers, name)
    by_formula = sum(8 * (s.in_features + s.out_features) * s.count * (s.layers or shape.num_layers)
                     for s in shape.targeted(("all-linear",)))
    assert by_formula == answers[name]["peft"][0]["trainable"]


def test_mixtral_lora_adapts_attention_only(answers: dict) -> None:
    shape = exact(answers, "mixtral_8x7b")
    assert shape.lora_params(8, ("all-linear",)) == 6_815_744


@pytest.mark.parametrize(("name", "experts", "top_k", "shared", "layer_class"), [
    ("mixtral_8x7b", 8, 2, 0, "MixtralDecoderLayer"),
    ("qwen1_5_moe_a2_7b", 60, 4, 1, "Qwen2MoeDecoderLayer"),
    ("deepseek_v2_lite", 64, 6, 2, "DeepseekV2DecoderLayer"),
    ("dbrx_base", 16, 4, 0, "DbrxBlock"),
])
def test_mixture_of_experts_layout(answers: dict, name: str, experts: int, top_k: int, shared: int,
                                   layer_class: str) -> None:
    shape = exact(answers, name)
    assert (shape.num_experts, shape.experts_per_token, shape.shared_experts) == (experts, top_k, shared)
    assert shape.decoder_layer_class == layer_class
    assert shape.router_params > 0


def test_active_parameters_match_the_model_cards(answers: dict) -> None:
    # Mixtral: "12.9 B active"; Qwen1.5-MoE-A2.7B: 2.7 B; DeepSeek-V2-Lite: 2.4 B activated
    assert round(exact(answers, "mixtral_8x7b").active_params / 1e9, 1) == 12.9
    assert round(exact(answers, "qwen1_5_moe_a2_7b").active_params / 1e9, 1) == 2.7
    deepseek = exact(answers, "deepseek_v2_lite")  # its card counts activated weights without the input embedding
    assert 2.4e9 <= deepseek.active_params - deepseek.embedding_params < 2.5e9  # "2.4 B" (2.45 B, truncated)
    # DeepSeek's first layer is dense: 26 MoE layers, not 27
    assert exact(answers, "deepseek_v2_lite").moe_layers == 26


@pytest.mark.parametrize("name", ["llama3_1_8b", "qwen2_5_7b", "mistral_7b", "qwen3_8b"])
def test_formula_path_equals_transformers_to_the_parameter(answers: dict, name: str) -> None:
    formula = shape_from_config(_config(name))
    shape = exact(answers, name)
    assert formula.total_params == shape.total_params
    assert formula.tie_word_embeddings == shape.tie_word_embeddings
    assert formula.lora_params(8, ("all-linear",)) == shape.lora_params(8, ("all-linear",))
    assert formula.linear_weight_params == shape.linear_weight_params


@pytest.mark.parametrize("name", ["llama3_1_8b", "qwen2_5_7b", "qwen3_8b"])
@pytest.mark.parametrize("tuner", ["full", "lora", "qlora"])
def test_planner_gives_the_same_forecast_from_either_path(answers: dict, name: str, tuner: str) -> None:
    request = EstimateRequest(tuner=tuner, lora_dropout=0.0 if tuner == "qlora" else 0.05)
    formula = estimate(shape_from_config(_config(name)), request)
    assert estimate(exact(answers, name), request).breakdown == formula.breakdown


def test_planner_sizes_every_expert(answers: dict) -> None:
    shape = exact(answers, "mixtral_8x7b")
    full = estimate(shape, EstimateRequest(tuner="full", precision="bf16", distribution="deepspeed",
                                           zero_stage=3, num_gpus=8))
    # bf16 DeepSpeed: 16 bytes per parameter of every expert, sharded over 8 GPUs
    states = full.breakdown["weights"] + full.breakdown["gradients"] + full.breakdown["master_weights"] \
        + full.breakdown["optimizer_states"]
    assert states == pytest.approx(16 * 46_702_792_704 / 8, rel=1e-6)
    assert any("expert parallelism" in note for note in full.notes)
    lora = estimate(shape, EstimateRequest(tuner="lora"))
    assert lora.params["trainable"] == 6_815_744
    assert lora.params["frozen"] == 46_702_792_704


def test_unknown_architecture_is_answered_as_data_and_labelled_estimated(tmp_path) -> None:
    config = {**_config("llama3_1_8b"), "model_type": "brand_new_arch", "architectures": ["BrandNewForCausalLM"],
              "auto_map": {"AutoModelForCausalLM": "modeling_brand_new.BrandNewForCausalLM"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = exact_shape(tmp_path)
    assert not shape.exact and shape.count_label.startswith("estimated, not exact")
    assert any("does not know model_type 'brand_new_arch'" in note and "its own code" in note
               for note in shape.notes)


def test_first_shape_asks_a_child_then_the_cache_answers_without_one(tmp_path, monkeypatch) -> None:
    import backend.oracle.runner

    # a config of its own: the session's oracle cache is shared by every test
    (tmp_path / "config.json").write_text(json.dumps({**_config("gemma2_2b"), "workbench_test_folder": str(tmp_path)}))
    seen: list[str] = []
    first = exact_shape(tmp_path, progress=seen.append)
    assert first.exact and first.total_params == HAND["gemma2_2b"]
    assert any("first time" in line for line in seen)  # announced

    def no_child(question: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"a child process was started for {question!r}: the cache should have answered")

    monkeypatch.setattr(backend.oracle.runner, "run_child", no_child)  # from here on, a child fails the test
    assert cached_shape(tmp_path) == first
    assert exact_shape(tmp_path) == first  # asking again: the cache answers (bench/model_shape_bench.py times it)
