"""The seed's textbook formulas (section 内存消耗估算), reproduced exactly.

    Phi = 12 * nl * hd^2                      model states = 16 * Phi
    checkpoints = 2 * bsz * seq * hd * nl / ci
    activation working = bsz * seq * ci * (16 * hd + 2 * attn_heads * seq)
    model-state working = 4 * hd * 4hd
"""

from __future__ import annotations

from backend.estimate import EstimateRequest, ModelShape, estimate, seed_view
from backend.estimate.seed import (
    seed_activation_checkpoints,
    seed_activation_working,
    seed_model_state_working,
    seed_model_states,
    seed_phi,
)


def test_seed_formulas_for_llama2_7b_by_hand(llama7b: ModelShape) -> None:
    v = seed_view(llama7b, bsz=1, seq=2048)
    assert v.phi == 12 * 32 * 4096**2 == 6_442_450_944
    assert v.model_states_bytes == 16 * 6_442_450_944 == 103_079_215_104
    assert v.activation_checkpoint_bytes == 2 * 1 * 2048 * 4096 * 32 // 1 == 536_870_912
    assert v.activation_working_bytes == 1 * 2048 * 1 * (16 * 4096 + 2 * 32 * 2048) == 402_653_184
    assert v.model_state_working_bytes == 4 * 4096 * (4 * 4096) == 268_435_456
    assert v.total_bytes == 103_079_215_104 + 536_870_912 + 402_653_184


def test_seed_formulas_with_checkpoint_interval() -> None:
    assert seed_activation_checkpoints(bsz=4, seq=1024, hd=5120, nl=40, ci=2) == 2 * 4 * 1024 * 5120 * 40 // 2
    assert seed_activation_working(bsz=4, seq=1024, ci=2, hd=5120, attn_heads=40) == (
        4 * 1024 * 2 * (16 * 5120 + 2 * 40 * 1024))
    # nl / ci need not be whole: the value stays exact
    assert seed_activation_checkpoints(bsz=1, seq=3, hd=1, nl=1, ci=4) == 2 * 3 / 4


def test_seed_building_blocks() -> None:
    assert seed_phi(nl=1, hd=10) == 1200
    assert seed_model_states(1200) == 19200
    assert seed_model_state_working(10) == 1600


def test_seed_view_travels_with_every_estimate(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, EstimateRequest(batch_size=2, max_length=4096))
    assert e.seed == seed_view(qwen7b, bsz=2, seq=4096)
    data = e.to_json()["seed"]
    assert data["phi"] == 12 * 28 * 3584**2
    assert data["model_states_bytes"] == 16 * data["phi"]
    assert data["inputs"] == {"nl": 28, "hd": 3584, "attn_heads": 28, "bsz": 2, "seq": 4096, "ci": 1}
    assert "textbook" in data["label"]


def test_textbook_underestimates_parameters_of_swiglu_models(qwen7b: ModelShape) -> None:
    """What a reader learns from the side-by-side: 12*nl*hd^2 misses SwiGLU's wide MLP and the vocabulary."""
    assert seed_phi(qwen7b.num_layers, qwen7b.hidden_size) < 0.6 * qwen7b.total_params
