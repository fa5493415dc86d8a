"""One test (or a few) per memory term, with the expected value written out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate import activations as act
from backend.estimate import terms as t
from backend.estimate.planner import GPU_TERMS


def req(**kw) -> EstimateRequest:
    return EstimateRequest(**kw)


# ---------------------------------------------------------------- conventions


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        (dict(tuner="full", distribution="deepspeed", num_gpus=2), (2, 2, 4, 8, 0)),  # ZeRO paper: 16
        (dict(tuner="full", distribution="fsdp", num_gpus=2), (4, 4, 0, 8, 0)),  # accelerate upcast: 16
        (dict(tuner="full"), (2, 2, 0, 4, 0)),  # pure bf16 under plain PyTorch: 8
        (dict(tuner="full", torch_dtype="fp32"), (4, 4, 0, 8, 2)),  # AMP with fp32 weights: 18
        (dict(tuner="full", precision="fp32"), (4, 4, 0, 8, 0)),  # fp32 everything: 16
        (dict(tuner="lora"), (4, 4, 0, 8, 2)),  # fp32 adapters under bf16 autocast: 18
        (dict(tuner="lora", adapter_dtype="bf16"), (2, 2, 0, 4, 0)),
        (dict(tuner="lora", adapter_dtype="bf16", optimizer="paged_adamw_32bit"), (2, 2, 0, 8, 0)),
    ],
)
def test_bytes_per_trainable_parameter(kw: dict, expected: tuple) -> None:
    sb = t.state_bytes(req(**kw))
    assert (sb.weight, sb.grad, sb.master, sb.moments, sb.autocast_copy) == expected
    assert str(sb.total) in sb.describe()


# ---------------------------------------------------------------- parameters


def test_lora_parameters_from_real_module_shapes(llama7b: ModelShape, qwen7b: ModelShape) -> None:
    # r * (in + out) per module: q and v of Llama-2-7B are 4096 x 4096, 32 layers
    assert t.lora_params(llama7b, req(target_modules=["q_proj", "v_proj"])) == 32 * 2 * 8 * (4096 + 4096)
    # GQA: Qwen2.5-7B's k/v project 3584 -> 512
    per_layer = 8 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 2 + (18944 + 3584))
    assert t.lora_params(qwen7b, req()) == 28 * per_layer == 20_185_088


def test_all_linear_excludes_lm_head(qwen7b: ModelShape) -> None:
    assert req().resolved_targets == ("all-linear",)  # what it covers is the model's business
    names = [s.name for s in qwen7b.targeted(req().resolved_targets)]
    assert names == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_inventory_by_tuner(qwen7b: ModelShape) -> None:
    full = t.ParamInventory.from_shape(qwen7b, req(tuner="full"))
    lora = t.ParamInventory.from_shape(qwen7b, req(tuner="lora"))
    qlora = t.ParamInventory.from_shape(qwen7b, req(tuner="qlora"))
    assert full.trainable == qwen7b.total_params and full.frozen_dense == 0
    assert lora.frozen_dense == qwen7b.total_params and lora.trainable == 20_185_088
    assert qlora.frozen_quantized == qwen7b.linear_weight_params
    assert qlora.frozen_dense == qwen7b.total_params - qwen7b.linear_weight_params


def test_model_states_single_gpu_full_bf16(llama7b: ModelShape) -> None:
    e = estimate(llama7b, req(tuner="full"))
    p = llama7b.total_params
    assert e.breakdown["weights"] == 2 * p
    assert e.breakdown["gradients"] == 2 * p
    assert e.breakdown["optimizer_states"] == 4 * p
    assert e.breakdown["master_weights"] == 0


# ---------------------------------------------------------------- activations


def test_full_finetune_layer_activations_by_hand(llama7b: ModelShape) -> None:
    """26h + 8I bytes per token for Llama-2-7B (bf16, SDPA, no GQA)."""
    h, i = 4096, 11008
    parts = act.layer_activation_parts(llama7b, req(tuner="full"))
    assert parts["norms"] == 2 * (4 * h + 2 * h)  # fp32 upcast input + normalised 16-bit output, twice
    assert parts["linear_inputs"] == 2 * (h + h + h + i)  # qkv input, o_proj input, gate/up input, down input
    assert parts["attention"] == 2 * 4 * h + 4 * 32  # q, k, v, output + fp32 logsumexp per head
    assert parts["mlp"] == 3 * 2 * i  # silu input, silu output, up output
    assert sum(parts.values()) == 26 * h + 8 * i + 128


def test_lora_layer_activations_count_dropout_copies(qwen7b: ModelShape) -> None:
    h, q, i, r = 3584, 3584, 18944, 8
    parts = act.layer_activation_parts(qwen7b, req())
    # every adapted module keeps a 1-byte dropout mask + a 16-bit copy of its input, and lora_A's output
    assert parts["linear_inputs"] == 3 * (5 * h + q + i) + 7 * 2 * r
    assert parts["norms"] == 2 * 4 * h  # frozen norm weights: no normalised copy
    no_dropout = act.layer_activation_parts(qwen7b, req(lora_dropout=0.0))
    assert no_dropout["linear_inputs"] == 2 * (5 * h + q + i) + 7 * 2 * r


def test_gqa_flash_attention_keeps_kv_at_kv_size(qwen7b: ModelShape) -> None:
    sdpa = act.layer_activation_parts(qwen7b, req(attn_implementation="sdpa"))["attention"]
    flash = act.layer_activation_parts(qwen7b, req(attn_implementation="flash_attn"))["attention"]
    assert sdpa - flash == 2 * 2 * (qwen7b.q_dim - qwen7b.kv_dim)  # repeat_kv expands k and v


def test_eager_attention_adds_the_s_squared_term(llama7b: ModelShape) -> None:
    sdpa = act.layer_activation_parts(llama7b, req(max_length=1024))["attention"]
    eager = act.layer_activation_parts(llama7b, req(max_length=1024, attn_implementation="eager"))["attention"]
    assert eager - sdpa == 32 * 1024 * (4 + 2)  # fp32 softmax + its 16-bit copy, heads x seq per token


def test_checkpointing_keeps_one_input_per_layer_plus_one_layer(llama7b: ModelShape) -> None:
    r = req(tuner="full", batch_size=2, max_length=1000)
    tokens = 2000
    per_layer = sum(act.layer_activation_parts(llama7b, r).values()) * tokens
    final = tokens * (4 * 4096 + 2 * 4096 + 2 * 4096)  # final norm (+ normalised copy) + lm_head input
    transient = tokens * 2 * (2 * 11008 + 2 * 4096)
    with_gc = act.activation_bytes(llama7b, r)
    without = act.activation_bytes(llama7b, replace(r, gradient_checkpointing=False))
    assert with_gc == 32 * 2 * 4096 * tokens + per_layer + final + transient
    assert without == 32 * per_layer + final + transient
    assert without > 10 * (with_gc - 32 * 2 * 4096 * tokens)


def test_activations_scale_linearly_with_tokens(qwen7b: ModelShape) -> None:
    one = act.activation_bytes(qwen7b, req(batch_size=1))
    four = act.activation_bytes(qwen7b, req(batch_size=4))
    assert four == pytest.approx(4 * one)
    assert act.activation_bytes(qwen7b, req(max_length=4096)) == pytest.approx(2 * one)


def test_liger_kernel_shrinks_norm_and_mlp_activations(qwen7b: ModelShape) -> None:
    plain = act.layer_activation_parts(qwen7b, req(tuner="full"))
    liger = act.layer_activation_parts(qwen7b, req(tuner="full", liger_kernel=True))
    assert liger["norms"] < plain["norms"] and liger["mlp"] == 2 * 2 * qwen7b.intermediate_size


# ---------------------------------------------------------------- logits


def test_logits_three_fp32_copies(qwen7b: ModelShape) -> None:
    assert act.logits_bytes(qwen7b, req(batch_size=2, max_length=1024)) == 2 * 1024 * 152064 * 12
    assert act.logits_bytes(qwen7b, req(loss_token_fraction=0.5)) == 2048 * 152064 * 12 * 0.5


def test_liger_never_materialises_logits(qwen7b: ModelShape) -> None:
    assert act.logits_bytes(qwen7b, req(liger_kernel=True)) < act.logits_bytes(qwen7b, req()) / 10


# ---------------------------------------------------------------- buffers, context, allocator


def test_ddp_keeps_a_bucket_copy_of_the_gradients(llama7b: ModelShape) -> None:
    e = estimate(llama7b, req(tuner="full", distribution="ddp", num_gpus=2))
    assert e.breakdown["comm_buffers"] == e.breakdown["gradients"]
    assert estimate(llama7b, req(tuner="full")).breakdown["comm_buffers"] == 0


def test_zero2_buckets_follow_the_workbench_config(llama7b: ModelShape) -> None:
    lora = estimate(llama7b, req(distribution="deepspeed", num_gpus=2, zero_stage=2))
    full = estimate(llama7b, req(tuner="full", distribution="deepspeed", num_gpus=2, zero_stage=2))
    stock = estimate(llama7b, req(tuner="full", distribution="deepspeed", num_gpus=2, zero_stage=2,
                                  ds_overlap_comm=True))
    trainable = lora.params["trainable"]
    assert lora.breakdown["comm_buffers"] == 2 * (4096**2 + trainable)  # allgather bucket capped by trainables
    assert full.breakdown["comm_buffers"] == 2 * (4096**2 + t.ZERO2_ALLGATHER_ELEMENTS)
    assert stock.breakdown["comm_buffers"] == 2 * 4.5 * (4096**2 + t.ZERO2_ALLGATHER_ELEMENTS)


def test_cuda_context_adds_nccl_when_distributed(llama7b: ModelShape) -> None:
    assert estimate(llama7b, req()).breakdown["cuda_context"] == t.CUDA_CONTEXT_BYTES
    multi = estimate(llama7b, req(distribution="ddp", num_gpus=2)).breakdown["cuda_context"]
    assert multi == t.CUDA_CONTEXT_BYTES + t.NCCL_BUFFER_BYTES


def test_allocator_overhead_formula(qwen7b: ModelShape) -> None:
    b = estimate(qwen7b, req()).breakdown
    static = sum(b[k] for k in ("weights", "weights_quantized", "quant_constants", "adapter_weights",
                                "master_weights", "gradients", "optimizer_states", "autocast_copies",
                                "comm_buffers"))
    dynamic = sum(b[k] for k in ("activations", "logits", "sharding_working", "optimizer_step_temp"))
    assert b["allocator_overhead"] == pytest.approx(0.05 * static + 0.10 * dynamic, abs=4)


def test_foreach_adamw_temporary_lives_in_the_optimizer_step(qwen7b: ModelShape) -> None:
    """The timeline (#26): the temporary exists in step(), when activations are freed; it shows in the
    breakdown only when that phase is the peak."""
    fused = estimate(qwen7b, req(tuner="full", max_length=512))
    foreach = estimate(qwen7b, req(tuner="full", max_length=512, optimizer="adamw_foreach"))
    b = foreach.breakdown
    temp = qwen7b.total_params * 2  # one bf16 state-sized tensor
    assert fused.breakdown["optimizer_step_temp"] == 0
    assert foreach.peak_phase == "optimizer_step"
    assert b["optimizer_step_temp"] == temp and b["activations"] == 0
    lora = estimate(qwen7b, req(optimizer="adamw_foreach"))
    assert lora.peak_phase == "steady_step"  # a small temporary: the step with activations is larger
    assert lora.breakdown["optimizer_step_temp"] == 0


def test_breakdown_sums_to_total_and_has_every_term(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, req())
    assert tuple(e.breakdown) == GPU_TERMS
    assert e.per_device_total_bytes == sum(e.breakdown.values())
    assert all(v >= 0 for v in e.breakdown.values())


# ---------------------------------------------------------------- host RAM


def test_host_load_peak_by_strategy(llama7b: ModelShape) -> None:
    weights = llama7b.total_params * 2
    assert t.host_load_bytes(llama7b, req()) == t.CHECKPOINT_SHARD_BYTES
    assert t.host_load_bytes(llama7b, req(tuner="full", distribution="fsdp", num_gpus=8)) == weights
    not_efficient = req(tuner="full", distribution="fsdp", num_gpus=8, fsdp_cpu_ram_efficient_loading=False)
    assert t.host_load_bytes(llama7b, not_efficient) == 8 * weights
    assert t.host_load_bytes(llama7b, req(tuner="full", distribution="deepspeed", num_gpus=8)) == 8 * weights


def test_host_total_is_the_largest_phase(llama7b: ModelShape) -> None:
    e = estimate(llama7b, req())
    assert e.host_breakdown["process_baseline"] == t.HOST_PROCESS_BYTES
    assert e.host_total_bytes == max(e.host_steady_bytes, e.host_load_peak_bytes, e.phase("save").host_total)
    assert e.host_load_peak_bytes == t.HOST_PROCESS_BYTES + t.CHECKPOINT_SHARD_BYTES


# ---------------------------------------------------------------- request validation


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(tuner="prefix"), "tuner must be one of"),
        (dict(precision="int8"), "precision must be one of"),
        (dict(distribution="single", num_gpus=2), "distribution 'single'"),
        (dict(offload=True), "offload needs distribution fsdp or deepspeed"),
        (dict(target_modules=["lm_head"]), "unknown target module"),
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(fsdp_strategy="SHARD_EVERYTHING"), "fsdp_strategy must be one of"),
        (dict(zero_stage=4), "zero_stage must be one of"),
        (dict(loss_token_fraction=0), "loss_token_fraction"),
    ],
)
def test_bad_requests_name_the_problem(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EstimateRequest(**kw)
