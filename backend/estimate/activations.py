"""The activation terms: bytes autograd saves per decoder layer (norms, linear inputs, attention, MLP,
router), the whole model's saved activations at the start of backward, and the logits and loss.

They count the tensors a Llama/Qwen2 decoder layer saves as transformers runs it (RMSNorm upcast to
fp32, SDPA without the s^2 score matrix, GQA k/v expanded by repeat_kv before SDPA, SwiGLU), plus
LoRA's per-module dropout copies; the other memory terms are in terms.py.
"""

from __future__ import annotations

from backend.estimate.request import EstimateRequest
from backend.models.shape import ModelShape

LOGIT_BYTES = 12  # per logit: fp32 log-softmax output + its fp32 gradient + the fp32 input gradient


def layer_activation_parts(shape: ModelShape, req: EstimateRequest) -> dict[str, float]:
    """Bytes autograd keeps per token for one decoder layer, by origin."""
    a = req.compute_bytes
    h, i = shape.hidden_size, shape.mlp_width
    full = req.tuner == "full"
    parts = {
        "norms": 2 * _norm_bytes(req, h, trainable=full) + _qk_norm_bytes(shape, req),
        "linear_inputs": _linear_input_bytes(shape, req),
        "attention": _attention_bytes(shape, req),
        # silu input, silu output, up output (liger recomputes silu); MoE: the top-k experts each
        # token is routed to, plus the shared experts
        "mlp": (2 if req.liger_kernel else 3) * a * i,
    }
    if shape.is_moe:
        # router logits (16-bit) and their fp32 softmax, the routing weights and the gathered
        # per-expert copies of the token's hidden state
        parts["router"] = (a + 4 + 4) * shape.num_experts + a * h * shape.experts_per_token
    return parts


def _norm_bytes(req: EstimateRequest, width: int, trainable: bool) -> float:
    """HF RMSNorm saves its input upcast to fp32; with a trainable weight also the normalised 16-bit value."""
    a = req.compute_bytes
    if req.liger_kernel:
        return a * width  # liger's RMSNorm keeps the input and a per-row rstd only
    return 4 * width + (a * width if trainable else 0)


def _qk_norm_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    if not shape.qk_norm:
        return 0.0
    return _norm_bytes(req, shape.q_dim, req.tuner == "full") + _norm_bytes(req, shape.kv_dim, req.tuner == "full")


def _linear_input_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Inputs linear layers keep for their weight gradients.

    Full fine-tuning: one shared input for q/k/v, the attention output for o_proj, one
    shared input for gate/up, the SwiGLU product for down_proj. LoRA: frozen base layers keep
    nothing, but every adapted module keeps its own copy of the input (PEFT casts it to the
    adapter dtype and applies dropout: 1-byte mask + 16-bit copy), plus lora_A's r-wide output.
    """
    a = req.compute_bytes
    if req.tuner == "full":
        return a * (2 * shape.hidden_size + shape.q_dim + shape.mlp_width)
    adapted = list({(s.path or s.name): s for s in shape.targeted(req.resolved_targets)}.values())  # one block
    lora_outputs = a * req.lora_rank * len(adapted)
    if req.lora_dropout == 0 and req.adapter_dtype in ("bf16", "fp16"):
        # no cast and no dropout: lora_A keeps the very tensor its base layer received, shared
        # by the projections that read the same input (q/k/v, or one fused qkv; gate/up)
        inputs = {(s.in_features, _input_group(s.name)): s.in_features for s in adapted}
        return sum(a * width for width in inputs.values()) + lora_outputs
    per_input = (1 + a) if req.lora_dropout > 0 else a
    return sum(per_input * s.in_features for s in adapted) + lora_outputs


def _input_group(name: str) -> str:
    """Projections that read the same tensor: attention input, attention output, MLP input, MLP middle."""
    if name in ("q_proj", "k_proj", "v_proj"):
        return "attention_in"
    if name in ("gate_proj", "up_proj"):
        return "mlp_in"
    return name


def _attention_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """SDPA keeps q, k, v, its output and an fp32 logsumexp; no s x s matrix.

    transformers' SDPA path expands k/v to all heads (repeat_kv) before the call, so the saved
    k/v are q-sized under GQA; flash-attention-2 keeps them at kv size. eager attention
    materialises the fp32 softmax and its 16-bit copy: heads * seq per token (the s^2 term).
    """
    a = req.compute_bytes
    kv_saved = shape.kv_dim if req.attn_implementation == "flash_attention_2" else shape.q_dim
    saved = a * (2 * shape.q_dim + 2 * kv_saved) + 4 * shape.num_heads
    if req.attn_implementation == "eager":
        saved += shape.num_heads * req.max_length * (4 + a)
    return saved


def held_activation_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """What autograd holds when backward starts: every layer's saved tensors (with gradient
    checkpointing only each layer's 16-bit input) and the final norm's."""
    tokens = req.batch_size * req.max_length
    a = req.compute_bytes
    lm_head_trainable = req.tuner == "full"
    final = tokens * (_norm_bytes(req, shape.hidden_size, lm_head_trainable)
                      + (a * shape.hidden_size if lm_head_trainable else 0))
    stored: float
    if req.gradient_checkpointing:
        stored = shape.num_layers * a * shape.hidden_size * tokens
    else:
        stored = shape.num_layers * sum(layer_activation_parts(shape, req).values()) * tokens
    return stored + final


def backward_working_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """What a decoder layer's backward adds while it runs: the gradients it makes on the way
    (the MLP's and the attention's input gradients), with gradient checkpointing the layer's whole
    saved set rebuilt for it, and under QLoRA the dequantised 16-bit copy of the weight it multiplies.

    This moment never meets the logits' peak: swift drops the model outputs (the 16-bit logits) when
    compute_loss returns (swift/trainers/seq2seq_trainer.py, compute_loss), the fp32 log-softmax and its
    gradients are freed once lm_head's backward has turned them into a hidden-sized gradient, and
    torch.utils.checkpoint rebuilds a layer only when backward reaches that layer's node (its
    CheckpointFunction.backward / the non-reentrant unpack hook) — after lm_head. Planner: phases.py
    takes the larger of the two moments.
    """
    tokens = req.batch_size * req.max_length
    a = req.compute_bytes
    working: float = tokens * a * (2 * shape.mlp_width + 2 * shape.hidden_size)
    if req.gradient_checkpointing:
        working += sum(layer_activation_parts(shape, req).values()) * tokens
    return working + dequantized_weight_bytes(shape, req)


def dequantized_weight_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """bitsandbytes multiplies by a 4-bit weight by first dequantising the whole of it to the input's
    dtype: `gemm_4bit`'s default kernel (bitsandbytes/backends/default/ops.py, `_gemm_4bit_default_impl`:
    `B_dq = dequantize_4bit(...)`, then `linear(A, B_dq)`) in forward, and MatMul4Bit.backward's
    `matmul(grad_output, dequantize_4bit(B, ctx.state).to(grad_output.dtype))` in backward. One linear
    at a time: the largest quantised one."""
    if req.tuner != "qlora" or req.quant_bits != 4:
        return 0.0
    largest = max((s.weight_params for s in shape.all_linears()), default=0)
    return req.compute_bytes * largest


def activation_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """All of a step's activation memory taken together (held + a layer's backward working set)."""
    return held_activation_bytes(shape, req) + backward_working_bytes(shape, req)


def logits_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Logits and the loss at their peak, the loss's backward: three fp32 batch*seq*vocab tensors.

    transformers' ForCausalLMLoss upcasts the logits (`logits = logits.float()`,
    transformers/loss/loss_utils.py) and cross_entropy saves its fp32 log-softmax output; in backward
    log_softmax's gradient is made from that output and the incoming fp32 gradient (4 + 4 + 4 bytes).
    The 16-bit logits are gone by then (the outputs die with compute_loss). In forward: 16-bit logits
    + fp32 upcast + saved log-softmax (2 + 4 + 4), no more. Liger's fused linear-cross-entropy never
    materialises them: about one fp32 hidden-sized chunk.
    """
    tokens = req.batch_size * req.max_length
    if req.liger_kernel:
        return tokens * shape.hidden_size * (4 + 2 * req.compute_bytes)
    held = 4 if (req.tuner == "qlora" and req.upcast_non_quantized) else 0  # an fp32 lm_head's logits, kept by the output
    return tokens * req.loss_token_fraction * shape.vocab_size * (LOGIT_BYTES + held)
