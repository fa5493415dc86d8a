"""The seed's textbook view, formula for formula (section 内存消耗估算 of the seed document).

    parameters              Phi = 12 * nl * hd^2
    model states            16 * Phi        (fp16 params 2 + fp16 grads 2 + fp32 params 4 + Adam m 4 + Adam v 4)
    activation checkpoints  2 * bsz * seq * hd * nl / ci
    activation working      bsz * seq * ci * (16 * hd + 2 * attn_heads * seq)
    model-state working     4 * hd * 4hd    (params + grads of the largest operator, the hd -> 4hd linear)

nl = layers, hd = hidden size, ci = transformer blocks between two activation checkpoints.
The textbook assumes a GPT-style block (4hd MLP, no GQA, no SwiGLU, attention scores
materialised) and one unsharded device; these numbers are reproduced exactly, not adjusted.
The total below is our sum of the first three terms (the seed gives the terms, not a total);
the model-state working memory is what remains on the GPU once every state is offloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from backend.models.shape import ModelShape


@dataclass(frozen=True)
class SeedView:
    """Textbook (seed) numbers in bytes, with the inputs they were computed from."""

    nl: int
    hd: int
    attn_heads: int
    bsz: int
    seq: int
    ci: int
    phi: int
    model_states_bytes: int
    activation_checkpoint_bytes: float
    activation_working_bytes: int
    model_state_working_bytes: int

    @property
    def total_bytes(self) -> float:
        return self.model_states_bytes + self.activation_checkpoint_bytes + self.activation_working_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "label": "textbook (seed) formulas, exact: 16*Phi, Phi = 12*nl*hd^2, no sharding",
            "inputs": {"nl": self.nl, "hd": self.hd, "attn_heads": self.attn_heads,
                       "bsz": self.bsz, "seq": self.seq, "ci": self.ci},
            "phi": self.phi,
            "model_states_bytes": self.model_states_bytes,
            "activation_checkpoint_bytes": self.activation_checkpoint_bytes,
            "activation_working_bytes": self.activation_working_bytes,
            "model_state_working_bytes": self.model_state_working_bytes,
            "total_bytes": self.total_bytes,
        }


def seed_phi(nl: int, hd: int) -> int:
    """Phi = 12 * nl * hd^2: four linears (hd,3hd), (hd,hd), (hd,4hd), (4hd,hd) per block."""
    return 12 * nl * hd**2


def seed_model_states(phi: int) -> int:
    return 16 * phi


def seed_activation_checkpoints(bsz: int, seq: int, hd: int, nl: int, ci: int = 1) -> int | float:
    """2 * bsz * seq * hd * nl / ci; exact (an int whenever ci divides the product)."""
    value = Fraction(2 * bsz * seq * hd * nl, ci)
    return int(value) if value.denominator == 1 else float(value)


def seed_activation_working(bsz: int, seq: int, ci: int, hd: int, attn_heads: int) -> int:
    return bsz * seq * ci * (16 * hd + 2 * attn_heads * seq)


def seed_model_state_working(hd: int) -> int:
    return 4 * hd * (4 * hd)


def seed_view(shape: ModelShape, bsz: int, seq: int, ci: int = 1) -> SeedView:
    """The textbook numbers for this model's nl, hd and heads at this batch and length."""
    nl, hd, heads = shape.num_layers, shape.hidden_size, shape.num_heads
    phi = seed_phi(nl, hd)
    return SeedView(
        nl=nl, hd=hd, attn_heads=heads, bsz=bsz, seq=seq, ci=ci, phi=phi,
        model_states_bytes=seed_model_states(phi),
        activation_checkpoint_bytes=seed_activation_checkpoints(bsz, seq, hd, nl, ci),
        activation_working_bytes=seed_activation_working(bsz, seq, ci, hd, heads),
        model_state_working_bytes=seed_model_state_working(hd),
    )
