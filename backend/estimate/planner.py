"""Put the terms together: `estimate(shape, request) -> Estimate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backend.estimate import activations as act
from backend.estimate import terms as t
from backend.estimate.cpu_host import device_on_host
from backend.estimate.phases import Phase, host_peak, peak, timeline
from backend.estimate.request import EstimateRequest
from backend.estimate.seed import SeedView, seed_view
from backend.models.shape import ModelShape

if TYPE_CHECKING:
    from backend.estimate.verdicts import FitReport

# display order; every key is always present in `breakdown` (0 when it does not apply)
GPU_TERMS = (
    "weights", "weights_quantized", "quant_constants", "adapter_weights", "master_weights",
    "gradients", "optimizer_states", "autocast_copies", "activations", "logits", "backward_working",
    "sharding_working", "comm_buffers", "optimizer_step_temp", "load_transient", "state_dict_gather",
    "cuda_context", "allocator_overhead",
)
HOST_TERMS = (
    "process_baseline", "weights", "weights_quantized", "adapter_weights", "master_weights",
    "gradients", "optimizer_states", "pinned_buffers",
)
TERM_HELP = {
    "weights": "dense weights on this device (full FT: all; LoRA: frozen base; QLoRA: embeddings, lm_head, norms)",
    "weights_quantized": "QLoRA base linears packed in 4-bit NF4 (or 8-bit)",
    "quant_constants": "bitsandbytes absmax constants (double-quantised) or 8-bit row scales",
    "adapter_weights": "LoRA A/B matrices (fp32 unless DeepSpeed casts them)",
    "master_weights": "fp32 master copy kept by DeepSpeed's mixed-precision optimizer",
    "gradients": "gradients of trainable parameters",
    "optimizer_states": "AdamW first and second moments",
    "autocast_copies": "16-bit copies autocast caches for fp32 trainable weights",
    "activations": "tensors saved for backward (each layer's checkpointed input, or all layers' tensors)",
    "logits": "batch*seq*vocab logits: fp32 log-softmax output, its gradient, the input gradient",
    "backward_working": "a layer's backward: its gradients, its recomputed tensors, a dequantised 4-bit weight"
                        " (never at the same moment as the logits: the larger of the two counts)",
    "sharding_working": "unsharded parameters/gradients while a unit computes (FSDP root unit + layers, ZeRO-3 fetch)",
    "comm_buffers": "DDP gradient buckets or ZeRO-1/2 reduce/allgather buckets",
    "optimizer_step_temp": "foreach AdamW's state-sized temporary in optimizer.step()",
    "load_transient": "held while loading: a linear's 16-bit copy being quantised, or a unit being broadcast",
    "state_dict_gather": "a unit or module gathered while the checkpoint is written",
    "cuda_context": "CUDA context, cuBLAS workspace, NCCL buffers",
    "allocator_overhead": "PyTorch caching allocator slack: 5% of long-lived, 10% of transient tensors",
}


@dataclass(frozen=True)
class Estimate:
    """Per-device GPU forecast (bytes by term), host RAM per node, and the seed's textbook view."""

    shape: ModelShape
    request: EstimateRequest
    breakdown: dict[str, int]  # the peak phase's terms
    host_breakdown: dict[str, int]  # while training
    host_load_peak_bytes: int
    phases: tuple[Phase, ...]
    weights_by_dtype: dict[str, int]
    params: dict[str, int]
    state_convention: t.StateBytes
    sharding_label: str
    seed: SeedView
    fit: FitReport | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def per_device_total_bytes(self) -> int:
        return sum(self.breakdown.values())

    @property
    def host_steady_bytes(self) -> int:
        return sum(self.host_breakdown.values())

    @property
    def host_total_bytes(self) -> int:
        """Per node: the largest phase (loading, training or saving)."""
        return host_peak(self.phases).host_total

    @property
    def peak_phase(self) -> str:
        return peak(self.phases).name

    @property
    def host_peak_phase(self) -> str:
        return host_peak(self.phases).name

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "per_device_total_bytes": self.per_device_total_bytes,
            "host_total_bytes": self.host_total_bytes,
            "breakdown": dict(self.breakdown),
            "host_breakdown": dict(self.host_breakdown),
            "host_steady_bytes": self.host_steady_bytes,
            "host_load_peak_bytes": self.host_load_peak_bytes,
            "peak_phase": self.peak_phase,
            "host_peak_phase": self.host_peak_phase,
            "timeline": [p.to_json() for p in self.phases],
            "weights_by_dtype": dict(self.weights_by_dtype),
            "parameters": dict(self.params),
            "convention": self.state_convention.describe(),
            "sharding": self.sharding_label,
            "seed": self.seed.to_json(),
            "model": self.shape.summary(),
            "request": self.request.to_dict(),
            "notes": list(self.notes),
        }
        if self.fit is not None:
            data["fit"] = self.fit.to_json()
        return data


def compute(shape: ModelShape, req: EstimateRequest) -> Estimate:
    """The forecast without the fit search (the search calls this many times)."""
    inv = t.ParamInventory.from_shape(shape, req)
    gpu_states, host_states = t.model_state_terms(inv, req)
    terms = dict(gpu_states)
    terms["activations"] = act.held_activation_bytes(shape, req)
    terms["logits"] = act.logits_bytes(shape, req)
    terms["backward_working"] = act.backward_working_bytes(shape, req)
    terms["sharding_working"] = t.sharding_working_bytes(shape, req)
    terms["comm_buffers"] = t.comm_buffer_bytes(shape, inv, req)
    terms["optimizer_step_temp"] = t.optimizer_step_temp_bytes(inv, req)
    terms["cuda_context"] = t.cuda_context_bytes(req)
    host = _host_terms(host_states, req)
    host_load = {"process_baseline": req.num_gpus * t.host_process_bytes(req), "weights_loading": t.host_load_bytes(shape, req)}
    phases = device_on_host(timeline(shape, req, terms, GPU_TERMS, host, host_load), req)
    return Estimate(
        shape=shape,
        request=req,
        breakdown=dict(peak(phases).gpu),
        host_breakdown=dict(next(p for p in phases if p.name == "steady_step").host),
        host_load_peak_bytes=round(sum(host_load.values())),
        phases=phases,
        weights_by_dtype=_weights_by_dtype(inv, req),
        params={"total": shape.total_params, "trainable": inv.trainable,
                "frozen": inv.frozen_dense + inv.frozen_quantized},
        state_convention=t.state_bytes(req),
        sharding_label=t.sharding(req).label,
        seed=seed_view(shape, req.batch_size, req.max_length),
        notes=_notes(shape, req),
    )


def _host_terms(host_states: dict[str, float], req: EstimateRequest) -> dict[str, float]:
    """Per node: every local process's host-resident states, plus its baseline RSS."""
    host = {name: 0.0 for name in HOST_TERMS}
    host["process_baseline"] = req.num_gpus * t.host_process_bytes(req)
    for name, value in host_states.items():
        host[name] = req.num_gpus * value
    if req.distribution == "deepspeed" and req.offload:
        offloaded = sum(req.num_gpus * v for v in host_states.values())
        host["pinned_buffers"] = (t.DEEPSPEED_HOST_BUFFER_FACTOR - 1) * offloaded
    return host


def _weights_by_dtype(inv: t.ParamInventory, req: EstimateRequest) -> dict[str, int]:
    """Whole-model weight bytes by storage dtype (before sharding), for the 'by dtype' view."""
    sb = t.state_bytes(req)
    out: dict[str, float] = {}

    def add(dtype: str, value: float) -> None:
        if value:
            out[dtype] = out.get(dtype, 0.0) + value

    frozen_b = t.frozen_weight_bytes(req)
    add("fp32" if frozen_b == 4 else _sixteen_bit_name(req), inv.frozen_dense * frozen_b)
    add("fp32" if sb.weight == 4 else _sixteen_bit_name(req), inv.trainable * sb.weight)
    if inv.frozen_quantized:
        add("nf4" if req.quant_bits == 4 else "int8", t.quantized_weight_bytes(inv, req))
        add("quant_constants", t.quant_constant_bytes(inv, req))
    return {name: round(value) for name, value in out.items()}


def _sixteen_bit_name(req: EstimateRequest) -> str:
    """Name of the 16-bit dtype in use: DeepSpeed casts to the precision's dtype."""
    if req.distribution == "deepspeed" and req.mixed_precision:
        return req.precision
    return req.weight_dtype if req.weight_dtype != "fp32" else req.precision


def _notes(shape: ModelShape, req: EstimateRequest) -> tuple[str, ...]:
    notes = list(req.notes)
    if not shape.exact and not shape.family_known:
        notes.append(f"model_type {shape.model_type!r}: estimated, not exact (sized as a Llama-style decoder)")
    notes.extend(shape.notes)
    if shape.is_moe:
        notes.append(f"mixture of experts: weights, gradients and optimizer states of all {shape.num_experts} "
                     "experts on every GPU (expert parallelism not modelled); activations of the "
                     f"{shape.experts_per_token} experts each token is routed to, plus the router")
        if req.tuner == "qlora" and shape.exact and shape.routed_expert_params > sum(
                s.weight_params * s.count * (s.layers or shape.num_layers) for s in shape.all_linears() if s.expert):
            notes.append("QLoRA: fused expert tensors are not nn.Linear, so bitsandbytes leaves them in 16 bits")
    if req.max_length > (shape.max_position_embeddings or req.max_length):
        notes.append(f"max_length {req.max_length} exceeds max_position_embeddings {shape.max_position_embeddings}")
    if t.fsdp_keeps_4bit_whole(req):
        notes.append("FSDP2 does not shard 4-bit weights packed as uint8 (accelerate leaves them out): every GPU "
                     "holds all of them, CPU offload or not; bnb_4bit_quant_storage = bfloat16 shards them")
    return tuple(notes)
