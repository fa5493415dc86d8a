"""A step's two peak moments (#37): the loss's backward holds the fp32 logits, a decoder layer's backward holds
its working set (with gradient checkpointing, the whole layer rebuilt); they never live at once, so the step
counts the larger, not both. And QLoRA's matmuls dequantise their 4-bit weight to 16 bits first.

Same tiny Llama-shaped model as test_estimate_phases.py (hidden 64, MLP 128, 2 layers, 4 heads, vocab 256,
untied), full fine-tuning in bf16, one row of 16 tokens, one GPU.
"""

from __future__ import annotations

from test_estimate_phases import TINY

from backend.estimate import EstimateRequest, estimate
from backend.estimate import activations as act
from backend.models.shape_formula import shape_from_config

# gradient checkpointing keeps each layer's 16-bit input: 2 layers * 2 bytes * 64 * 16 tokens = 4,096, and
# the final norm's fp32 input, its normalised 16-bit output and lm_head's 16-bit input: (256 + 128 + 128) * 16
HELD = 4_096 + 8_192
# a layer's backward: the layer rebuilt (2,704 bytes a token, see test_estimate_phases) * 16 = 43,264, plus
# its transient gradients 16 * 2 * (2*128 + 2*64) = 12,288
WORKING = 43_264 + 12_288  # 55,552
LOGITS = 16 * 256 * 12  # 49,152: smaller than the layer's working set here


def test_with_checkpointing_the_layer_moment_is_the_peak_and_the_logits_are_not_added() -> None:
    e = estimate(shape_from_config(TINY), EstimateRequest(tuner="full", max_length=16))
    steady = e.phase("steady_step").gpu
    assert steady["activations"] == HELD
    assert steady["backward_working"] == WORKING
    assert steady["logits"] == 0  # freed before any layer's backward begins
    # the old sum (held + working + logits = 116,992 bytes) counted two moments at once
    assert steady["activations"] + steady["backward_working"] + steady["logits"] == 67_840


def test_a_longer_vocabulary_makes_the_loss_moment_the_peak() -> None:
    wide = shape_from_config({**TINY, "vocab_size": 1024})  # logits 16 * 1024 * 12 = 196,608 > 55,552
    steady = estimate(wide, EstimateRequest(tuner="full", max_length=16)).phase("steady_step").gpu
    assert steady["logits"] == 196_608
    assert steady["backward_working"] == 0
    assert steady["activations"] == HELD


def test_qlora_counts_the_largest_linear_dequantised_to_16_bits() -> None:
    shape = shape_from_config(TINY)
    # the largest quantised linear is an MLP projection, 64 x 128 = 8,192 weights, 2 bytes each in bf16
    assert act.dequantized_weight_bytes(shape, EstimateRequest(tuner="qlora", max_length=16)) == 16_384
    assert act.dequantized_weight_bytes(shape, EstimateRequest(tuner="lora", max_length=16)) == 0
    qlora = EstimateRequest(tuner="qlora", max_length=16)
    assert act.backward_working_bytes(shape, qlora) - 16_384 == act.backward_working_bytes(
        shape, EstimateRequest(tuner="lora", max_length=16, lora_dropout=qlora.lora_dropout))
