"""Each sharding strategy: what is divided by what, what lives where, what is gathered."""

from __future__ import annotations

import pytest

from backend.estimate import EstimateRequest, ModelShape, estimate
from backend.estimate import terms as t

STATES = ("weights", "gradients", "master_weights", "optimizer_states")


def states(shape: ModelShape, **kw) -> dict[str, int]:
    b = estimate(shape, EstimateRequest(tuner="full", **kw)).breakdown
    return {k: b[k] for k in STATES}


def test_ddp_replicates_everything(llama7b: ModelShape) -> None:
    assert states(llama7b, distribution="ddp", num_gpus=8) == states(llama7b)


@pytest.mark.parametrize(
    ("stage", "divided"),
    [(0, ()), (1, ("master_weights", "optimizer_states")),
     (2, ("master_weights", "optimizer_states", "gradients")),
     (3, ("master_weights", "optimizer_states", "gradients", "weights"))],
)
def test_zero_stages_divide_states_by_world_size(llama7b: ModelShape, stage: int, divided: tuple) -> None:
    one = states(llama7b, distribution="deepspeed", zero_stage=stage, num_gpus=1)
    eight = states(llama7b, distribution="deepspeed", zero_stage=stage, num_gpus=8)
    for name in STATES:
        expected = one[name] / 8 if name in divided else one[name]
        assert eight[name] == pytest.approx(expected, abs=1), name


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD"])
def test_fsdp_shards_states_at_rest(llama7b: ModelShape, strategy: str) -> None:
    nodes = 2 if strategy == "HYBRID_SHARD" else 1
    s = states(llama7b, distribution="fsdp", fsdp_strategy=strategy, num_gpus=4, num_nodes=nodes)
    p = llama7b.total_params
    degree = 4  # HYBRID_SHARD shards within a node (4 GPUs) and replicates across the 2 nodes
    assert s["weights"] == pytest.approx(4 * p / degree, abs=1)  # fp32 after accelerate's upcast
    assert s["gradients"] == pytest.approx(4 * p / degree, abs=1)
    assert s["optimizer_states"] == pytest.approx(8 * p / degree, abs=1)


def test_hybrid_shard_equals_full_shard_within_one_node(llama7b: ModelShape) -> None:
    hybrid = estimate(llama7b, EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="HYBRID_SHARD",
                                               num_gpus=4, num_nodes=2))
    full = estimate(llama7b, EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="FULL_SHARD",
                                             num_gpus=4, num_nodes=1))
    assert hybrid.breakdown == full.breakdown


def test_fsdp_working_memory_root_unit_and_two_layers(qwen7b: ModelShape) -> None:
    r = EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="FULL_SHARD", num_gpus=8)
    root = qwen7b.embedding_params + qwen7b.lm_head_params + qwen7b.final_norm_params
    layer = qwen7b.params_per_layer
    # 16-bit gathered root unit (embeddings + lm_head: the largest unit), current + prefetched layer,
    # and the unsharded 16-bit gradients of the root and of one layer
    expected = 2 * root + 2 * 2 * layer + 2 * (root + layer)
    assert t.sharding_working_bytes(qwen7b, r) == expected
    assert root > 4 * layer  # for Qwen2.5-7B the embedding unit dwarfs a decoder layer


def test_shard_grad_op_keeps_every_unit_gathered(qwen7b: ModelShape) -> None:
    r = EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="SHARD_GRAD_OP", num_gpus=8)
    root = qwen7b.embedding_params + qwen7b.lm_head_params + qwen7b.final_norm_params
    expected = 2 * root + 28 * 2 * qwen7b.params_per_layer + 2 * (root + qwen7b.params_per_layer)
    assert t.sharding_working_bytes(qwen7b, r) == expected


def test_fsdp_on_one_gpu_falls_back_to_no_shard(llama7b: ModelShape) -> None:
    one = EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="SHARD_GRAD_OP", num_gpus=1)
    assert one.effective_fsdp_strategy == "NO_SHARD"
    same = EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy="NO_SHARD", num_gpus=1)
    assert estimate(llama7b, one).breakdown == estimate(llama7b, same).breakdown
    assert "fallback" in estimate(llama7b, one).sharding_label


def test_more_sharding_is_never_more_memory(llama70b: ModelShape) -> None:
    totals = [
        estimate(llama70b, EstimateRequest(tuner="full", distribution="fsdp", fsdp_strategy=s, num_gpus=8))
        .per_device_total_bytes
        for s in ("NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD")
    ]
    assert totals[0] > totals[1] > totals[2]


def test_zero3_working_is_deepspeeds_largest_layer_rule(qwen7b: ModelShape) -> None:
    r = EstimateRequest(tuner="full", distribution="deepspeed", zero_stage=3, num_gpus=8)
    largest = qwen7b.largest_module_params  # the embedding, 545M parameters
    h2 = 3584**2
    assert t.sharding_working_bytes(qwen7b, r) == pytest.approx(2 * (largest + 0.9 * h2) + 2 * (largest + h2))


def test_fsdp_offload_moves_every_state_to_host(llama7b: ModelShape) -> None:
    r = EstimateRequest(tuner="full", distribution="fsdp", num_gpus=4, offload=True)
    e = estimate(llama7b, r)
    p = llama7b.total_params
    for name in STATES:
        assert e.breakdown[name] == 0, name
    assert e.host_breakdown["weights"] == pytest.approx(4 * p / 4 * 4, abs=4)  # 4 local ranks x fp32 shard
    assert e.host_breakdown["optimizer_states"] == pytest.approx(8 * p, abs=4)
    assert e.breakdown["sharding_working"] > 0  # units are still gathered on the GPU to compute


def test_zero2_offload_keeps_16bit_weights_on_gpu(llama7b: ModelShape) -> None:
    e = estimate(llama7b, EstimateRequest(tuner="full", distribution="deepspeed", zero_stage=2, num_gpus=4,
                                          offload=True))
    p = llama7b.total_params
    assert e.breakdown["weights"] == 2 * p
    assert e.breakdown["gradients"] == 0 and e.breakdown["optimizer_states"] == 0
    # host per node: fp32 master + 2 moments + fp32 gradient partition = 16 bytes/param, x1.5 pinned buffers
    offloaded = e.host_breakdown["master_weights"] + e.host_breakdown["optimizer_states"] + e.host_breakdown[
        "gradients"]
    assert offloaded == pytest.approx(16 * p, abs=8)
    assert e.host_breakdown["pinned_buffers"] == pytest.approx(0.5 * offloaded, abs=8)


def test_zero3_offload_param_flag(llama7b: ModelShape) -> None:
    both = estimate(llama7b, EstimateRequest(tuner="full", distribution="deepspeed", zero_stage=3, num_gpus=4,
                                             offload=True))
    optim_only = estimate(llama7b, EstimateRequest(tuner="full", distribution="deepspeed", zero_stage=3,
                                                   num_gpus=4, offload=True, offload_param=False))
    assert both.breakdown["weights"] == 0
    assert optim_only.breakdown["weights"] == pytest.approx(2 * llama7b.total_params / 4, abs=1)


def test_lora_frozen_base_is_sharded_but_not_upcast(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, EstimateRequest(distribution="fsdp", num_gpus=4))
    assert e.breakdown["weights"] == pytest.approx(2 * qwen7b.total_params / 4, abs=1)
    assert e.breakdown["adapter_weights"] == pytest.approx(4 * 20_185_088 / 4, abs=1)
