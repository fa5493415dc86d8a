"""The forecast as a timeline: which terms live in each phase of a run, and where the peak falls.

Every term (backend/estimate/terms.py) exists only in some phases:

* load: the weights as they arrive, plus what loading itself holds for a moment (bitsandbytes
  quantises each linear from its 16-bit copy; FSDP broadcasts rank 0's weights a unit at a time;
  ZeRO-3 partitions module by module).
* first step (forward and backward of step 1): gradients, activations and logits, but no optimizer
  state yet: torch's AdamW creates its moments in the first `step()` (DeepSpeed creates them when
  the engine starts, so they are there already). "Succeeds in the first step, then OOMs".
* optimizer step: activations are gone; gradients, moments and the foreach temporary are there.
* steady step (step 2 on): the first step plus the moments (and master weights). Gradients are
  counted with the activations, as gradient-accumulation buffers live across the whole step.
* eval: the eval batch, no gradients (the Trainer drops them after each step; DeepSpeed keeps its
  buffers), no saved activations: one layer's working set and the eval logits.
* save: the state dict gathered (FSDP FULL_STATE_DICT and ZeRO-3's 16-bit gather on rank 0, in
  host RAM), one unit at a time on the GPU.

GPU figures are per device and the same on every rank; rank 0's extra host RAM when saving or
loading is in the host figures, which are per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.estimate import terms as t
from backend.estimate.request import DTYPE_BYTES, EstimateRequest
from backend.models.shape import ModelShape

PHASES = ("load", "first_step", "optimizer_step", "steady_step", "eval", "save")
PHASE_HELP = {
    "load": "model loaded, before training starts (quantisation and broadcast transients)",
    "first_step": "forward + backward of step 1: gradients and activations, no optimizer state yet",
    "optimizer_step": "optimizer.step(): gradients, moments and their temporaries, activations freed",
    "steady_step": "forward + backward from step 2 on: moments, gradients and activations together",
    "eval": "evaluation: the eval batch, no gradients, no saved activations",
    "save": "checkpoint: the state dict gathered (GPU: one unit at a time; host: on rank 0)",
}

RESIDENT = ("weights", "weights_quantized", "quant_constants", "adapter_weights")
STATES = ("master_weights", "optimizer_states")
STATIC = (*RESIDENT, *STATES, "gradients", "autocast_copies", "comm_buffers", "load_transient")
DYNAMIC = ("activations", "logits", "backward_working", "sharding_working", "optimizer_step_temp",
           "state_dict_gather")


@dataclass(frozen=True)
class Phase:
    """One phase: GPU bytes per device and host bytes per node, by term (each dict sums to its total)."""

    name: str
    gpu: dict[str, int]
    host: dict[str, int]

    @property
    def gpu_total(self) -> int:
        return sum(self.gpu.values())

    @property
    def host_total(self) -> int:
        return sum(self.host.values())

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.name, "gpu_total_bytes": self.gpu_total,
                "gpu_terms": {k: v for k, v in self.gpu.items() if v},
                "host_total_bytes": self.host_total, "host_terms": {k: v for k, v in self.host.items() if v}}


def peak(phases: tuple[Phase, ...]) -> Phase:
    """The phase with the largest GPU total (the earliest of equals)."""
    return max(phases, key=lambda p: p.gpu_total)


def host_peak(phases: tuple[Phase, ...]) -> Phase:
    return max(phases, key=lambda p: p.host_total)


def timeline(shape: ModelShape, req: EstimateRequest, terms: dict[str, float], gpu_names: tuple[str, ...],
             host_steady: dict[str, float], host_load: dict[str, float]) -> tuple[Phase, ...]:
    """The phases of one run from its terms (`terms`: every GPU term's steady-state size, the foreach
    temporary in full); `gpu_names` orders each phase's dict."""
    deepspeed = req.distribution == "deepspeed"
    resident = _pick(terms, *RESIDENT, "cuda_context")
    step = step_terms(terms)
    states = _pick(terms, *STATES)
    gpu = {
        "load": {**resident, "load_transient": load_transient_bytes(shape, req)},
        # torch optimizers create their state in the first step(); DeepSpeed's engine does at start-up
        "first_step": {**resident, **step, **(states if deepspeed else {})},
        "optimizer_step": {**resident, **states, **_pick(terms, "gradients", "comm_buffers", "optimizer_step_temp")},
        "steady_step": {**resident, **step, **states},
        "eval": {**resident, **states, **_pick(terms, "comm_buffers"), **(_pick(terms, "gradients") if deepspeed
                                                                            else {}),
                 "activations": eval_activation_bytes(shape, req), "logits": eval_logits_bytes(shape, req),
                 "sharding_working": gathered_params_bytes(shape, req)},
        "save": {**resident, **states, "state_dict_gather": gpu_save_gather_bytes(shape, req)},
    }
    host_first = dict(host_steady) if deepspeed else {**host_steady, "master_weights": 0.0, "optimizer_states": 0.0}
    host = {"load": host_load, "first_step": host_first, "optimizer_step": host_steady, "steady_step": host_steady,
            "eval": host_steady, "save": {**host_steady, "state_dict_gather": host_save_gather_bytes(shape, req)}}
    return tuple(Phase(name, _with_overhead(gpu[name], gpu_names), _rounded(host[name])) for name in PHASES)


def step_terms(terms: dict[str, float]) -> dict[str, float]:
    """A training step's terms at its peak moment: the loss's backward (the logits' fp32 tensors) or a
    decoder layer's backward (its working set), whichever is larger — they never live at once
    (activations.backward_working_bytes says why); the other is 0 in the phase's dict."""
    base = _pick(terms, "gradients", "autocast_copies", "activations", "sharding_working", "comm_buffers")
    loss_moment = {**base, "logits": terms.get("logits", 0.0), "backward_working": 0.0}
    layer_moment = {**base, "logits": 0.0, "backward_working": terms.get("backward_working", 0.0)}
    return max(loss_moment, layer_moment, key=lambda moment: sum(moment.values()))


def _pick(terms: dict[str, float], *names: str) -> dict[str, float]:
    return {name: terms.get(name, 0.0) for name in names}


def _with_overhead(values: dict[str, float], names: tuple[str, ...]) -> dict[str, int]:
    """Every GPU term (0 where absent) plus the caching allocator's slack on this phase's tensors."""
    full = {name: values.get(name, 0.0) for name in names}
    full["allocator_overhead"] = (t.ALLOCATOR_STATIC_FRACTION * sum(full.get(n, 0.0) for n in STATIC)
                                  + t.ALLOCATOR_DYNAMIC_FRACTION * sum(full.get(n, 0.0) for n in DYNAMIC))
    return {name: round(value) for name, value in full.items()}


def _rounded(values: dict[str, float]) -> dict[str, int]:
    return {name: round(value) for name, value in values.items()}


# ---------------------------------------------------------------- phase-only terms


def load_transient_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """What loading holds for a moment beyond the weights.

    QLoRA: bitsandbytes quantises a linear from its 16-bit copy on the GPU (the largest one);
    FSDP: rank 0 broadcasts one unit at a time (sync_module_states); ZeRO-3: one module gathered.
    """
    if req.distribution == "fsdp" and req.world_size > 1:
        units = t.unit_sizes(shape, req)
        return max(units.root_gathered, units.layer_gathered)
    if req.distribution == "deepspeed" and req.zero_stage == 3:
        return req.compute_bytes * shape.largest_module_params
    if req.tuner == "qlora":
        largest = max((s.weight_params for s in shape.all_linears()), default=0)
        return DTYPE_BYTES[req.weight_dtype] * largest
    return 0.0


def eval_tokens(req: EstimateRequest) -> int:
    return (req.eval_batch_size or req.batch_size) * req.max_length


def eval_activation_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """No autograd in eval: the residual stream plus one layer's working set (attention in and out,
    the MLP's gate/up/product), as in the training forward's transient."""
    a = req.compute_bytes
    per_token = a * (2 * shape.mlp_width + 2 * shape.hidden_size + 2 * shape.q_dim + 2 * shape.kv_dim)
    return eval_tokens(req) * per_token


def eval_logits_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """16-bit logits, their fp32 upcast for the loss and the log-softmax output; liger: a chunk."""
    tokens = eval_tokens(req)
    if req.liger_kernel:
        return tokens * shape.hidden_size * (4 + 2 * req.compute_bytes)
    return tokens * req.loss_token_fraction * shape.vocab_size * (req.compute_bytes + 4 + 4)


def gathered_params_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Sharding working memory without gradients: FSDP's gathered units, ZeRO-3's fetched module."""
    if req.distribution == "fsdp":
        units = t.unit_sizes(shape, req)
        if req.effective_fsdp_strategy == "NO_SHARD" and not req.mixed_precision:
            return 0.0
        return units.root_gathered + 2 * units.layer_gathered
    if req.distribution == "deepspeed" and req.zero_stage == 3:
        return req.compute_bytes * (shape.largest_module_params + t.ZERO3_PREFETCH_FACTOR * shape.hidden_size**2)
    return 0.0


def gpu_save_gather_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Saving gathers one unit (FSDP, in the flat parameters' dtype) or module (ZeRO-3) at a time."""
    if req.distribution == "fsdp" and req.world_size > 1:
        units = t.unit_sizes(shape, req)
        upcast = 2 if (req.tuner == "full" and req.mixed_precision) else 1  # fp32 flat parameters
        return upcast * max(units.root_gathered, units.layer_gathered)
    if req.distribution == "deepspeed" and req.zero_stage == 3:
        return req.compute_bytes * shape.largest_module_params
    return 0.0


def host_save_gather_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Host RAM a checkpoint takes per node while it is written.

    FSDP FULL_STATE_DICT: the whole model (the Trainer asks accelerate for the full state dict, frozen
    weights too) and the optimizer state on rank 0; SHARDED_STATE_DICT: each rank writes its shard
    tensor by tensor (torch.distributed.checkpoint), nothing gathered.
    ZeRO-3: the 16-bit model gathered on rank 0. Otherwise safetensors builds one file (up to a 5 GB
    shard; LoRA: the adapters) in memory.
    """
    model = shape.total_params * (4 if req.tuner == "full" and req.mixed_precision
                                  and req.distribution == "fsdp" else DTYPE_BYTES[req.weight_dtype])
    trainable = shape.total_params if req.tuner == "full" else t.lora_params(shape, req)
    if req.distribution == "fsdp" and req.world_size > 1:
        optim = trainable * t.state_bytes(req).moments
        return model + optim if req.fsdp_state_dict_type == "FULL_STATE_DICT" else 0.0
    if req.distribution == "deepspeed" and req.zero_stage == 3:
        return shape.total_params * req.compute_bytes
    if req.tuner == "full":
        return min(model, t.CHECKPOINT_SHARD_BYTES)
    return trainable * t.state_bytes(req).weight
