"""FLOPs per token from a model's exact shape, as a training step really spends them.

Counted in multiply-adds x 2 over the matmuls a token goes through (PaLM's convention, appendix B):
- the decoder's linear layers and the output layer (lm_head: its matmul happens even when its weight is
  the tied embedding; the embedding lookup is no matmul): N weights a token multiplies with (a mixture of
  experts: only the experts it is routed to);
- attention's sequence term: a token's query meets T keys and T values, 4·T·(heads x head_dim) per layer
  forward (the causal mask is not subtracted, as PaLM does), 12·L·T·d_attn for forward and backward.

Full fine-tuning: 6·N (forward 2N, backward 2N for the activations' gradients and 2N for the weights').
LoRA / QLoRA: a frozen weight gets no weight gradient: 4·N on the base, plus 6·N_adapters on the adapters.
Gradient checkpointing recomputes the forward in the backward: hardware FLOPs (+2N, +4·L·T·d_attn), never
model FLOPs; MFU divides model FLOPs, HFU hardware FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.models.shape import ModelShape


@dataclass(frozen=True)
class TokenFlops:
    """Training FLOPs per token of one run's model and tuner, at one attended length."""

    base_matmul_params: int  # N: the weights a token multiplies with
    adapter_params: int  # LoRA's A and B of every adapted linear (0: full fine-tuning)
    attention_per_token: float  # forward and backward, at `sequence`
    model: float  # per token, what MFU divides
    hardware: float  # per token, recompute included
    sequence: float
    tuner: str
    recompute: bool

    def describe(self) -> str:
        rule = "6·N" if self.tuner == "full" else "4·N frozen + 6·N adapters"
        extra = f"; {self.hardware:,.0f} with checkpointing's recompute (hardware)" if self.recompute else ""
        return f"{self.model:,.0f} FLOPs per token ({rule} + attention at {self.sequence:,.0f} tokens){extra}"


def matmul_params(shape: ModelShape) -> int:
    """N: decoder linears a token goes through (routed experts: only its top-k) plus the output layer."""
    total = 0
    for spec in shape.all_linears():
        weights = spec.weight_params * spec.count * (spec.layers or shape.num_layers)
        if spec.expert and shape.num_experts:
            weights = weights * shape.experts_per_token // shape.num_experts
        total += weights
    if shape.is_moe and not any(s.expert for s in shape.all_linears()):
        total += shape.routed_expert_params * shape.experts_per_token // max(1, shape.num_experts)
    return total + shape.vocab_size * shape.hidden_size


def attention_flops(shape: ModelShape, sequence: float) -> float:
    """Forward and backward of QK^T and AV for one token attending to `sequence` positions."""
    return 12.0 * shape.num_layers * sequence * shape.q_dim


def token_flops(shape: ModelShape, *, tuner: str, sequence: float, lora_rank: int = 8,
                targets: tuple[str, ...] = ("all-linear",), recompute: bool = False) -> TokenFlops:
    """FLOPs per trained token; `sequence`: the mean length a token attends over (token-weighted)."""
    n = matmul_params(shape)
    attention = attention_flops(shape, sequence)
    adapters = 0 if tuner == "full" else shape.lora_params(lora_rank, targets)
    model = (6.0 * n if tuner == "full" else 4.0 * n + 6.0 * adapters) + attention
    again = 2.0 * (n + adapters) + attention / 3.0 if recompute else 0.0
    return TokenFlops(base_matmul_params=n, adapter_params=adapters, attention_per_token=attention, model=model,
                      hardware=model + again, sequence=sequence, tuner=tuner, recompute=recompute)
