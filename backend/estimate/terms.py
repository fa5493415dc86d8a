"""The memory terms, one small function each, in bytes per device (floats; rounded by the caller).

Conventions (the README section explains the why):

* Bytes per *trainable* parameter = weight + gradient + fp32 master + two AdamW moments:
  - DeepSpeed, 16-bit mixed precision: 2 + 2 + 4 + 8 = 16 (the ZeRO paper's K=12 convention,
    the seed's 16 Phi);
  - FSDP under mixed precision: accelerate upcasts trainable flat parameters to fp32 (FSDP2 not in a
    4-bit model: the adapters keep their dtype), so
    4 + 4 + 0 + 8 = 16, plus 16-bit unsharded copies counted as sharding working memory;
  - plain PyTorch (single / DDP): the optimizer keeps states in the parameter's dtype, so
    pure bf16 full fine-tuning is 2 + 2 + 0 + 4 = 8, fp32 weights are 16, and fp32 weights
    under autocast add a cached 16-bit copy (18);
  - LoRA / QLoRA adapters are fp32 (PEFT's autocast_adapter_dtype): 16 (+2 autocast copy);
  - bitsandbytes' paged_adamw_32bit keeps 8 bytes of moments whatever the parameter dtype.
* Activations and logits: backend/estimate/activations.py.
* Each term is its size where it lives; backend/estimate/phases.py says in which phases of a run it
  lives (load, first step, optimizer step, steady step, eval, save), and the peak is the largest
  phase. Within a step gradients and activations are summed (accumulation buffers live across the
  step); the real peak can be lower without accumulation. Safe side.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.core.units import GIB, MIB
from backend.estimate.request import DTYPE_BYTES, EstimateRequest
from backend.models.shape import ModelShape

CUDA_CONTEXT_BYTES = 600 * MIB  # CUDA context + cuBLAS workspace per process (nvidia-smi: 0.5-0.8 GiB)
NCCL_BUFFER_BYTES = 500 * MIB  # NCCL channels/buffers per process when world size > 1
ALLOCATOR_STATIC_FRACTION = 0.05  # caching-allocator slack on long-lived tensors
ALLOCATOR_DYNAMIC_FRACTION = 0.10  # fragmentation from activations and other churn
HOST_PROCESS_BYTES = 3 * GIB  # RSS of one training process: Python, torch, CUDA libs, tokenizer, data
CHECKPOINT_SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size (5GB)
DEEPSPEED_HOST_BUFFER_FACTOR = 1.5  # DeepSpeed estimators' additional_buffer_factor for pinned host memory
ZERO2_ALLGATHER_ELEMENTS = 2e8  # allgather_bucket_size in the workbench's and ms-swift's zero2 configs
ZERO2_OVERLAP_FACTOR = 4.5  # DeepSpeed docs: overlap_comm uses 4.5x the bucket sizes
ZERO3_PREFETCH_FACTOR = 0.9  # HF "auto": stage3_prefetch_bucket_size = 0.9 * hidden^2

# bitsandbytes 4-bit: one absmax per block of 64 weights; double quantisation stores it as
# 8 bits plus one fp32 constant per 256 blocks (QLoRA paper, section 3: 0.127 vs 0.5 bits/param)
NF4_BYTES = 0.5
DQ_CONSTANT_BYTES = 1 / 64 + 4 / (64 * 256)
PLAIN_CONSTANT_BYTES = 4 / 64


# ---------------------------------------------------------------- conventions


@dataclass(frozen=True)
class StateBytes:
    """Bytes per trainable parameter, by kind (see module docstring)."""

    weight: int
    grad: int
    master: int
    moments: int
    autocast_copy: int = 0

    @property
    def total(self) -> int:
        return self.weight + self.grad + self.master + self.moments + self.autocast_copy

    def describe(self) -> str:
        parts = [f"{self.weight} weight", f"{self.grad} gradient"]
        if self.master:
            parts.append(f"{self.master} fp32 master")
        parts.append(f"{self.moments} AdamW moments")
        if self.autocast_copy:
            parts.append(f"{self.autocast_copy} autocast 16-bit copy")
        return f"{self.total} bytes per trainable parameter ({' + '.join(parts)})"


def state_bytes(req: EstimateRequest) -> StateBytes:
    """Which bytes-per-trainable-parameter convention applies to this request."""
    if req.distribution == "deepspeed":
        # the engine casts the module to 16-bit and keeps an fp32 master copy for the optimizer
        return StateBytes(2, 2, 4, 8) if req.mixed_precision else StateBytes(4, 4, 0, 8)
    # accelerate upcasts trainable parameters to fp32 under mixed precision: FSDP1 every flat parameter that
    # requires grad (accelerator.py, prepare_model), FSDP2 likewise unless the model holds Params4bit
    # (fsdp_utils.py, fsdp2_prepare_model: `not model_has_params4bit`). Frozen weights are never upcast: for a
    # PEFT model the Trainer swaps in PEFT's fsdp_auto_wrap_policy (transformers/distributed/fsdp.py,
    # update_fsdp_plugin_peft), which wraps each trainable leaf (a LoRA Linear) as its own unit, so no flat
    # parameter mixes frozen and trainable weights (swift keeps transformers' training loop)
    fsdp_mixed = req.distribution == "fsdp" and req.mixed_precision
    upcast = fsdp_mixed and not (req.fsdp_version == 2 and req.tuner == "qlora" and req.quant_bits == 4)
    if upcast:
        stored = 4
    elif req.is_adapter:
        stored = DTYPE_BYTES[req.adapter_dtype or "fp32"]
    else:
        stored = DTYPE_BYTES[req.weight_dtype]
    autocast = 2 if (req.mixed_precision and stored == 4 and not fsdp_mixed) else 0
    moments = 8 if req.optimizer == "paged_adamw_32bit" else 2 * stored
    return StateBytes(stored, stored, 0, moments, autocast)


def frozen_weight_bytes(req: EstimateRequest) -> int:
    """Bytes per frozen (non-quantised) parameter: DeepSpeed casts the module to 16-bit; PEFT's
    prepare_model_for_kbit_training upcasts QLoRA's non-quantised weights to fp32."""
    if req.tuner == "qlora" and req.upcast_non_quantized:
        return 4
    if req.distribution == "deepspeed" and req.mixed_precision:
        return 2
    return DTYPE_BYTES[req.weight_dtype]


# ---------------------------------------------------------------- parameters


@dataclass(frozen=True)
class ParamInventory:
    """Parameters by how they are stored. Tests build one directly (e.g. the ZeRO paper's 7.5B)."""

    trainable: int
    frozen_dense: int = 0  # frozen, stored in torch_dtype (LoRA base; QLoRA's embeddings/lm_head/norms/biases)
    frozen_quantized: int = 0  # QLoRA: decoder linear weights held in 4 or 8 bits
    quantized_rows: int = 0  # sum of out_features of quantised linears (8-bit row scales)

    @classmethod
    def from_shape(cls, shape: ModelShape, req: EstimateRequest) -> ParamInventory:
        if req.tuner == "full":
            return cls(trainable=shape.total_params)
        adapters = lora_params(shape, req)
        if req.tuner == "lora":
            return cls(trainable=adapters, frozen_dense=shape.total_params)
        rows = sum(s.out_features * s.count * (s.layers or shape.num_layers) for s in shape.all_linears())
        return cls(trainable=adapters, frozen_dense=shape.dense_kept_params,
                   frozen_quantized=shape.linear_weight_params, quantized_rows=rows)

    @property
    def total(self) -> int:
        return self.trainable + self.frozen_dense + self.frozen_quantized


def lora_params_per_layer(shape: ModelShape, req: EstimateRequest) -> int:
    """LoRA parameters of one block (the average block when blocks differ)."""
    return lora_params(shape, req) // max(1, shape.num_layers)


def lora_params(shape: ModelShape, req: EstimateRequest) -> int:
    """PEFT's count when transformers answered for these targets, else r * (in + out) per targeted linear."""
    return shape.lora_params(req.lora_rank, req.resolved_targets)


def fsdp_keeps_4bit_whole(req: EstimateRequest) -> bool:
    """FSDP2 leaves uint8-packed 4-bit weights out of sharding: accelerate's fsdp2_prepare_model
    (accelerate/utils/fsdp_utils.py) adds every frozen Params4bit that is not floating point to fully_shard's
    `ignored_params` ("Excluding from FSDP2 sharding to prevent quant_state corruption"), which fully_shard
    neither shards nor moves (torch/distributed/fsdp/_fully_shard/_fully_shard.py, its docstring): every GPU
    holds all of them where bitsandbytes quantised them, on the GPU, CPU offload or not, and no unit's
    all-gather carries them. Packed in a float dtype (bnb_4bit_quant_storage) they are sharded like any
    parameter; FSDP1 flattens them (it needs one dtype per flat parameter, so a float storage)."""
    return (req.distribution == "fsdp" and req.fsdp_version == 2 and req.tuner == "qlora" and req.quant_bits == 4
            and req.bnb_4bit_quant_storage in (None, "uint8"))


def quantized_weight_bytes(inv: ParamInventory, req: EstimateRequest) -> float:
    return inv.frozen_quantized * (NF4_BYTES if req.quant_bits == 4 else 1)


def quant_constant_bytes(inv: ParamInventory, req: EstimateRequest) -> float:
    """Absmax constants (4-bit) or fp32 row scales (8-bit); not sharded: they are module attributes."""
    if req.quant_bits == 8:
        return 4 * inv.quantized_rows
    return inv.frozen_quantized * (DQ_CONSTANT_BYTES if req.double_quant else PLAIN_CONSTANT_BYTES)


# ---------------------------------------------------------------- sharding


@dataclass(frozen=True)
class Sharding:
    """Divisors for each kind of state, and where each kind lives."""

    params: int = 1
    grads: int = 1
    optim: int = 1
    params_on_host: bool = False
    grads_on_host: bool = False
    optim_on_host: bool = False
    label: str = "no sharding"


def sharding(req: EstimateRequest) -> Sharding:
    n = req.world_size
    if req.distribution == "fsdp":
        strategy = req.effective_fsdp_strategy
        if strategy == "NO_SHARD":
            degree, label = 1, "FSDP NO_SHARD" + (f" (FSDP's fallback for {req.fsdp_strategy} on one GPU)"
                                                  if req.fsdp_strategy != "NO_SHARD" else "")
        elif strategy == "HYBRID_SHARD":
            degree, label = req.num_gpus, f"FSDP HYBRID_SHARD over {req.num_gpus} GPUs per node"
        else:
            degree, label = n, f"FSDP {strategy} over {n} GPUs"
        off = req.offload
        return Sharding(degree, degree, degree, off, off, off, label + (" + CPU offload" if off else ""))
    if req.distribution == "deepspeed":
        stage = req.zero_stage
        params = n if stage == 3 else 1
        grads = n if stage >= 2 else 1
        optim = n if stage >= 1 else 1
        label = f"DeepSpeed ZeRO-{stage} over {n} GPUs" + (" + offload" if req.offload else "")
        return Sharding(params, grads, optim, req.offload_params, req.offload and stage >= 2, req.offload, label)
    return Sharding(label="DDP (replicated)" if req.distribution == "ddp" else "single GPU")


# ---------------------------------------------------------------- model states


def model_state_terms(inv: ParamInventory, req: EstimateRequest) -> tuple[dict[str, float], dict[str, float]]:
    """Weights, gradients, master copy and optimizer moments: (GPU terms, host terms), per device."""
    sb, sh = state_bytes(req), sharding(req)
    gpu: dict[str, float] = {}
    host: dict[str, float] = {}
    weights = {
        "weights": inv.frozen_dense * frozen_weight_bytes(req) / sh.params
        + (0 if req.is_adapter else inv.trainable * sb.weight / sh.params),
        "weights_quantized": quantized_weight_bytes(inv, req) / sh.params,
        "adapter_weights": inv.trainable * sb.weight / sh.params if req.is_adapter else 0.0,
    }
    (host if sh.params_on_host else gpu).update(weights)
    if fsdp_keeps_4bit_whole(req):
        host.pop("weights_quantized", None)
        gpu["weights_quantized"] = quantized_weight_bytes(inv, req)
    gpu["quant_constants"] = quant_constant_bytes(inv, req)
    optim = {"master_weights": inv.trainable * sb.master / sh.optim,
             "optimizer_states": inv.trainable * sb.moments / sh.optim}
    (host if sh.optim_on_host else gpu).update(optim)
    if req.distribution == "deepspeed" and req.offload:
        # ZeRO-Offload keeps an fp32 gradient partition next to the CPU optimizer
        host["gradients"] = inv.trainable * 4 / req.world_size
        gpu["gradients"] = 0.0 if sh.grads_on_host else inv.trainable * sb.grad / sh.grads
    else:
        (host if sh.grads_on_host else gpu)["gradients"] = inv.trainable * sb.grad / sh.grads
    gpu["autocast_copies"] = inv.trainable * sb.autocast_copy
    if req.distribution == "fsdp" and req.offload and req.fsdp_version == 1:
        host["pinned_buffers"] = fsdp1_frozen_grad_buffer_bytes(inv, req, sh)
    return gpu, host


def fsdp1_frozen_grad_buffer_bytes(inv: ParamInventory, req: EstimateRequest, sh: Sharding) -> float:
    """FSDP1 with CPU offload pins a gradient buffer the size of every flat parameter's shard in host RAM,
    frozen ones included (torch/distributed/fsdp/_flat_param.py, FlatParamHandle.init_flat_param_attributes:
    `flat_param._cpu_grad = torch.zeros_like(flat_param._local_shard, device=cpu_device).pin_memory()`, whatever
    requires_grad). The trainable ones' buffers are their gradients (counted there); this is the frozen rest."""
    frozen = inv.frozen_dense * frozen_weight_bytes(req) + quantized_weight_bytes(inv, req)
    return frozen / sh.params


# ---------------------------------------------------------------- sharding working memory


@dataclass(frozen=True)
class UnitSizes:
    """FSDP units under TRANSFORMER_BASED_WRAP: one per decoder layer, plus the root unit
    (embeddings + final norm + lm_head), which FSDP1 keeps unsharded from forward to backward."""

    layer_gathered: float
    layer_trainable: int
    root_gathered: float
    root_trainable: int


def unit_sizes(shape: ModelShape, req: EstimateRequest) -> UnitSizes:
    c = req.compute_bytes
    lora = lora_params_per_layer(shape, req) if req.is_adapter else 0
    if req.tuner == "qlora":
        quant = shape.linear_weight_params_per_layer
        gathered_quant = 0.0 if fsdp_keeps_4bit_whole(req) else quant * (NF4_BYTES if req.quant_bits == 4 else 1)
        layer = gathered_quant + c * (shape.params_per_layer - quant + lora)
    else:
        layer = c * (shape.params_per_layer + lora)
    root_params = shape.embedding_params + shape.lm_head_params + shape.final_norm_params
    return UnitSizes(
        layer_gathered=layer,
        layer_trainable=shape.params_per_layer if req.tuner == "full" else lora,
        root_gathered=c * root_params,
        root_trainable=root_params if req.tuner == "full" else 0,
    )


def sharding_working_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Unsharded parameters and gradients that exist only while a unit computes."""
    c = req.compute_bytes
    if req.distribution == "fsdp":
        u = unit_sizes(shape, req)
        grads = c * (u.root_trainable + u.layer_trainable)
        strategy = req.effective_fsdp_strategy
        if strategy == "SHARD_GRAD_OP":
            # parameters are not resharded after forward: every unit stays gathered until its backward
            return u.root_gathered + shape.num_layers * u.layer_gathered + grads
        if strategy == "NO_SHARD" and not req.mixed_precision:
            return 0.0  # gradients land in the (full) flat parameter's .grad directly
        # FULL_SHARD / HYBRID_SHARD gather the current unit and prefetch the next; NO_SHARD under
        # mixed precision likewise holds 16-bit copies of the units in flight
        return u.root_gathered + 2 * u.layer_gathered + grads
    if req.distribution == "deepspeed" and req.zero_stage == 3:
        return _zero3_working_bytes(shape, req)
    return 0.0


def _zero3_working_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """ZeRO-3 gathers one module at a time (plus a prefetch bucket) and reduces its gradients
    through a bucket: DeepSpeed's "4 x largest layer", with HF's "auto" bucket sizes."""
    c = req.compute_bytes
    h2 = shape.hidden_size**2
    if req.tuner == "full":
        largest_trainable = shape.largest_module_params
    else:
        largest_trainable = max((req.lora_rank * (s.in_features + s.out_features)
                                 for s in shape.targeted(req.resolved_targets)), default=0)
    gathered = shape.largest_module_params + ZERO3_PREFETCH_FACTOR * h2
    reduced = largest_trainable + min(h2, _trainable_count(shape, req))
    return c * (gathered + reduced)


def _trainable_count(shape: ModelShape, req: EstimateRequest) -> int:
    return shape.total_params if req.tuner == "full" else lora_params(shape, req)


def comm_buffer_bytes(shape: ModelShape, inv: ParamInventory, req: EstimateRequest) -> float:
    """DDP's gradient buckets (a full copy of the gradients) and ZeRO-1/2's reduce/allgather buckets.

    ZeRO-1/2 buckets follow the config the workbench writes (backend/launch/command.py): reduce bucket
    "auto" (= hidden^2 elements), allgather bucket 2e8, overlap_comm off. ms-swift's stock
    zero2.json turns overlap_comm on (`ds_overlap_comm=True`), which costs 4.5x the buckets.
    """
    if req.distribution == "ddp" and req.world_size > 1:
        return inv.trainable * state_bytes(req).grad
    if req.distribution == "deepspeed" and req.zero_stage in (1, 2):
        factor = ZERO2_OVERLAP_FACTOR if req.ds_overlap_comm else 1.0
        reduce = min(factor * shape.hidden_size**2, inv.trainable)
        allgather = min(factor * ZERO2_ALLGATHER_ELEMENTS, inv.trainable)
        return req.compute_bytes * (reduce + allgather)
    return 0.0


def optimizer_step_temp_bytes(inv: ParamInventory, req: EstimateRequest) -> float:
    """adamw_foreach allocates one state-sized temporary (sqrt of the second moment) in step().

    The fused AdamW (transformers' current default, and DeepSpeed's FusedAdam) does not.
    """
    sh = sharding(req)
    if req.optimizer != "adamw_foreach" or sh.optim_on_host or req.distribution == "deepspeed":
        return 0.0
    return inv.trainable * state_bytes(req).moments / 2 / sh.optim


def cuda_context_bytes(req: EstimateRequest) -> float:
    return CUDA_CONTEXT_BYTES + (NCCL_BUFFER_BYTES if req.world_size > 1 else 0)


# ---------------------------------------------------------------- host RAM


def host_process_bytes(req: EstimateRequest) -> float:
    """RSS of one training process beyond its other host terms: this machine's calibration when its runs
    measured it (backend/estimate/calibration.py), else the textbook HOST_PROCESS_BYTES; plus its data-loader
    workers' when measured."""
    base = HOST_PROCESS_BYTES if req.host_process_bytes is None else req.host_process_bytes
    return base + req.host_worker_bytes


def host_load_bytes(shape: ModelShape, req: EstimateRequest) -> float:
    """Host RAM taken by weights while the model loads, per node.

    single / DDP / QLoRA stream safetensors shards straight to the GPU (device_map); FSDP with
    cpu_ram_efficient_loading loads one full copy on rank 0; ZeRO-3 partitions while loading;
    ZeRO-0/1/2 load a full copy in every process before moving it to the GPU.
    """
    load_bytes = shape.total_params * DTYPE_BYTES[req.weight_dtype]
    shard = min(load_bytes, CHECKPOINT_SHARD_BYTES)
    if req.tuner == "qlora" or req.distribution in ("single", "ddp"):
        return req.num_gpus * shard
    if req.distribution == "fsdp":
        return load_bytes if req.fsdp_cpu_ram_efficient_loading else req.num_gpus * load_bytes
    if req.zero_stage == 3:
        return req.num_gpus * shard
    return req.num_gpus * load_bytes
