"""The forecast as a timeline (#26): each phase holds only the terms that live in it; the peak is the largest.

The tiny Llama-shaped model below is sized by hand: hidden 64, MLP 128, 2 layers, 4 heads (no GQA), vocab
256, untied. Parameters: embeddings 256*64 = 16,384; per layer q/k/v/o 4*64*64 = 16,384, MLP 3*64*128 =
24,576, two norms 128 -> 41,088, two layers 82,176; final norm 64; lm_head 16,384: 115,008 in all.
Full fine-tuning in bf16 (plain PyTorch: weights 2, gradients 2, AdamW moments 2*2 bytes), one row of 16
tokens, no gradient checkpointing, fused AdamW (no temporary), one GPU.
"""

from __future__ import annotations

import pytest
from estimate_helpers import GIB

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate import terms as t
from backend.models.shape_formula import shape_from_config

TINY = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=256,
            max_position_embeddings=512, tie_word_embeddings=False, torch_dtype="bfloat16")
CONTEXT = 600 * 2**20  # CUDA context of one process

WEIGHTS = 2 * 115_008  # 230,016
GRADIENTS = 2 * 115_008
MOMENTS = 4 * 115_008  # 460,032
# saved activations per token and layer: norms 2*(4*64 fp32 input + 2*64 normalised) = 768, linear inputs
# 2*(2*64 + 64 + 128) = 640, attention q,k,v,out 2*4*64 + fp32 logsumexp 4*4 = 528, SwiGLU 3*2*128 = 768:
# 2,704 * 16 tokens * 2 layers = 86,528; final norm (384 + 128) * 16 = 8,192
ACTIVATIONS = 86_528 + 8_192  # 94,720 held when backward starts
LOGITS = 16 * 256 * 12  # 49,152
# a layer's backward: its transient gradients 16 * 2 * (2*128 + 2*64) = 12,288, smaller than the logits'
# peak, and never at the same moment (the logits are freed before the layers' backward): not counted
BACKWARD_WORKING = 12_288
# eval, no autograd: 16 tokens * 2 bytes * (2*128 + 2*64 + 2*64 + 2*64) = 20,480; logits 16*256*(2+4+4)
EVAL_ACTIVATIONS = 20_480
EVAL_LOGITS = 40_960


def tiny() -> ModelShape:
    return shape_from_config(TINY)


def test_tiny_model_phases_by_hand() -> None:
    e = estimate(tiny(), EstimateRequest(tuner="full", max_length=16, gradient_checkpointing=False))
    assert e.params["total"] == 115_008
    totals = {p.name: p.gpu_total for p in e.phases}
    # allocator slack: 5 % of long-lived tensors, 10 % of activations/logits, rounded
    assert BACKWARD_WORKING < LOGITS
    first = WEIGHTS + GRADIENTS + ACTIVATIONS + LOGITS + CONTEXT + 37_389  # .05*460,032 + .1*143,872
    steady = first - 37_389 + MOMENTS + 60_390  # .05*920,064 + .1*143,872
    assert totals == {
        "load": WEIGHTS + CONTEXT + 11_501,
        "first_step": first,  # no optimizer state yet
        "optimizer_step": WEIGHTS + GRADIENTS + MOMENTS + CONTEXT + 46_003,  # activations freed
        "steady_step": steady,
        "eval": WEIGHTS + MOMENTS + EVAL_ACTIVATIONS + EVAL_LOGITS + CONTEXT + 40_646,  # no gradients
        "save": WEIGHTS + MOMENTS + CONTEXT + 34_502,
    }
    assert totals["first_step"] < totals["steady_step"]
    assert e.phase("first_step").gpu["optimizer_states"] == 0
    assert e.phase("eval").gpu["gradients"] == 0
    # the peak is the largest phase, and the breakdown is its terms, summing to the total
    assert e.peak_phase == "steady_step"
    assert e.per_device_total_bytes == steady == sum(e.breakdown.values())
    assert e.breakdown["optimizer_states"] == MOMENTS and e.breakdown["activations"] == ACTIVATIONS
    assert e.breakdown["backward_working"] == 0  # the loss's backward is this step's peak moment


def test_the_json_carries_the_timeline() -> None:
    data = estimate(tiny(), EstimateRequest(tuner="full", max_length=16, gradient_checkpointing=False)).to_json()
    assert data["peak_phase"] == "steady_step"
    phases = [p["phase"] for p in data["timeline"]]
    assert phases == ["load", "first_step", "optimizer_step", "steady_step", "eval", "save"]
    first = data["timeline"][1]
    assert first["gpu_terms"] == {"weights": WEIGHTS, "gradients": GRADIENTS, "activations": ACTIVATIONS,
                                  "logits": LOGITS, "cuda_context": CONTEXT, "allocator_overhead": 37_389}
    assert first["gpu_total_bytes"] == sum(first["gpu_terms"].values())


def test_foreach_temporary_makes_the_optimizer_step_the_peak(qwen7b: ModelShape) -> None:
    """Qwen2.5-7B full, 512 tokens, adamw_torch (foreach): its state-sized temporary (2 bytes a parameter)
    lives in step(), where activations are gone; the step is the peak, and says so."""
    e = estimate(qwen7b, EstimateRequest(tuner="full", max_length=512, optimizer="adamw_foreach"))
    step = e.phase("optimizer_step").gpu
    assert step["optimizer_step_temp"] == 2 * qwen7b.total_params
    assert step["activations"] == 0 and step["logits"] == 0
    assert e.peak_phase == "optimizer_step"


def test_deepspeed_has_its_optimizer_state_from_the_first_step(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, EstimateRequest(tuner="full", distribution="deepspeed", zero_stage=2, num_gpus=4))
    assert e.phase("first_step").gpu["optimizer_states"] == e.phase("steady_step").gpu["optimizer_states"] > 0


def test_fsdp_full_state_dict_save_is_the_host_peak(llama7b: ModelShape) -> None:
    """Llama-2-7B full, FSDP over 8 GPUs, FULL_STATE_DICT: rank 0 gathers the fp32 model (4 bytes a
    parameter) and the AdamW moments (8) in host RAM, beside the 8 processes' 3 GiB each."""
    r = EstimateRequest(tuner="full", distribution="fsdp", num_gpus=8, fsdp_state_dict_type="FULL_STATE_DICT")
    e = estimate(llama7b, r)
    assert e.host_peak_phase == "save"
    assert e.host_total_bytes == 8 * t.HOST_PROCESS_BYTES + 12 * llama7b.total_params
    sharded = estimate(llama7b, EstimateRequest(tuner="full", distribution="fsdp", num_gpus=8))
    assert sharded.host_peak_phase == "load"  # each rank writes its own shard: rank 0's full copy at load
    assert sharded.host_total_bytes == pytest.approx(8 * t.HOST_PROCESS_BYTES + 2 * llama7b.total_params, abs=1)
    assert e.host_total_bytes > 80 * GIB > sharded.host_total_bytes
