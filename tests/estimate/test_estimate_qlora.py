"""QLoRA: 4-bit NF4 weights, double-quantisation constants, the parts kept in 16-bit.

The constants follow the QLoRA paper (Dettmers et al. 2023, section 3, "Double Quantization"):
one fp32 absmax per 64 weights costs 32/64 = 0.5 bits per parameter; quantising those to 8 bits
with a second fp32 constant per 256 blocks costs 8/64 + 32/(64*256) = 0.127 bits.
"""

from __future__ import annotations

import pytest

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate import terms as t


def qlora(**kw) -> EstimateRequest:
    return EstimateRequest(tuner="qlora", **kw)


def test_double_quant_constants_cost_0_127_bits_per_parameter() -> None:
    assert t.DQ_CONSTANT_BYTES * 8 == pytest.approx(0.127, abs=0.0005)
    assert t.PLAIN_CONSTANT_BYTES * 8 == 0.5


def test_nf4_weights_and_constants(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, qlora())
    linear = qwen7b.linear_weight_params
    assert e.breakdown["weights_quantized"] == round(0.5 * linear)
    assert e.breakdown["quant_constants"] == round(linear * (1 / 64 + 4 / (64 * 256)))
    plain = estimate(qwen7b, qlora(double_quant=False))
    assert plain.breakdown["quant_constants"] == round(linear * 4 / 64)


def test_embeddings_lm_head_norms_and_biases_stay_16bit(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, qlora())
    kept = 2 * 152064 * 3584 + 3584 + 28 * (2 * 3584 + 3584 + 512 + 512)  # embed + lm_head + norms + qkv biases
    assert qwen7b.dense_kept_params == kept
    assert e.breakdown["weights"] == 2 * kept
    assert e.weights_by_dtype == {"bf16": 2 * kept, "fp32": 4 * 20_185_088,
                                  "nf4": round(0.5 * qwen7b.linear_weight_params),
                                  "quant_constants": e.breakdown["quant_constants"]}


def test_eight_bit_uses_one_byte_and_row_scales(llama7b: ModelShape) -> None:
    e = estimate(llama7b, qlora(quant_bits=8))
    assert e.breakdown["weights_quantized"] == llama7b.linear_weight_params
    rows = 32 * (3 * 4096 + 4096 + 2 * 11008 + 4096)  # out_features of q,k,v,o,gate,up,down
    assert e.breakdown["quant_constants"] == 4 * rows


def test_qlora_is_much_smaller_than_lora_and_full(qwen7b: ModelShape) -> None:
    q = estimate(qwen7b, qlora()).per_device_total_bytes
    lora = estimate(qwen7b, EstimateRequest()).per_device_total_bytes
    full = estimate(qwen7b, EstimateRequest(tuner="full")).per_device_total_bytes
    assert q < 0.6 * lora < full


def test_qlora_trainables_are_the_same_adapters_as_lora(qwen7b: ModelShape) -> None:
    q, lora = estimate(qwen7b, qlora()), estimate(qwen7b, EstimateRequest())
    for name in ("adapter_weights", "gradients", "optimizer_states"):
        assert q.breakdown[name] == lora.breakdown[name]
    assert q.breakdown["activations"] == lora.breakdown["activations"]  # frozen bases save no inputs either way


def test_fsdp_qlora_shards_packed_weights_but_not_constants(llama70b: ModelShape) -> None:
    one = estimate(llama70b, qlora(distribution="fsdp", num_gpus=1))
    two = estimate(llama70b, qlora(distribution="fsdp", num_gpus=2))
    assert two.breakdown["weights_quantized"] == pytest.approx(one.breakdown["weights_quantized"] / 2, abs=1)
    assert two.breakdown["quant_constants"] == one.breakdown["quant_constants"]


def test_fsdp_qlora_gathers_layers_in_4bit(llama70b: ModelShape) -> None:
    r = qlora(distribution="fsdp", num_gpus=2)
    units = t.unit_sizes(llama70b, r)
    lora_per_layer = t.lora_params_per_layer(llama70b, r)
    dense = llama70b.params_per_layer - llama70b.linear_weight_params_per_layer
    assert units.layer_gathered == 0.5 * llama70b.linear_weight_params_per_layer + 2 * (dense + lora_per_layer)
    assert units.root_trainable == 0


def test_llama2_70b_qlora_fits_two_24gb_gpus_with_fsdp(llama70b: ModelShape) -> None:
    """The seed (ms-swift docs): "FSDP+QLoRA: 双卡3090运行70B模型的训练" -- 70B on two 24 GB 3090s;
    Answer.AI's FSDP+QLoRA announcement (March 2024) says the same.

    Our forecast agrees at short sequences (tight), and says longer ones need CPU offload.
    """
    short = estimate(llama70b, qlora(distribution="fsdp", num_gpus=2, max_length=512, gpu_memory_bytes=24 * 2**30))
    assert short.fit is not None and short.fit.status in ("fits", "tight")
    long = estimate(llama70b, qlora(distribution="fsdp", num_gpus=2, max_length=2048, gpu_memory_bytes=24 * 2**30))
    assert long.fit is not None and long.fit.status == "does not fit"
    assert long.fit.cheapest_strategy == "FSDP FULL_SHARD + offload"
