"""What is being planned: tuner, precision, distribution, batch geometry.

`EstimateRequest` is a plain dataclass validated on construction (and again by
`dataclasses.replace`, which the fit search uses to vary one field at a time). Field names
follow ms-swift / accelerate where they exist.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from backend.models.shape import LINEAR_MODULES

TUNERS = ("full", "lora", "qlora")
PRECISIONS = ("fp32", "fp16", "bf16")
DISTRIBUTIONS = ("single", "ddp", "fsdp", "deepspeed")
FSDP_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
FSDP_VERSIONS = (1, 2)
QUANT_STORAGES = ("uint8", "fp32", "fp16", "bf16")
ZERO_STAGES = (0, 1, 2, 3)
ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "eager")
OPTIMIZERS = ("adamw", "adamw_foreach", "paged_adamw_32bit")
STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
_MODULE_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_NOT_TARGETS = {"lm_head", "embed_tokens"}
_ATTN_ALIASES = {"flash_attn": "flash_attention_2", "flash_attention_2": "flash_attention_2",
                 "fa2": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}


@dataclass(frozen=True)
class EstimateRequest:
    """One training configuration to size. Defaults follow ms-swift's `swift sft` defaults.

    torch_dtype: dtype the weights are loaded in; None = the precision's dtype (fp32 -> fp32).
    adapter_dtype: dtype of LoRA weights; None = fp32 (PEFT's autocast_adapter_dtype default);
      the QLoRA reference code casts them to bf16.
    optimizer: adamw = torch fused AdamW (transformers' default since torch 2.8; no temporaries),
      adamw_foreach = torch AdamW before that (one state-sized temporary in step()),
      paged_adamw_32bit = bitsandbytes, fp32 states whatever the parameter dtype (paged: the
      driver may move them to host under pressure; counted on the GPU here).
    gpu_memory_bytes / host_memory_bytes: per GPU / per node; when the GPU's is set, `estimate`
      adds a fit report (and checks host RAM of offloading strategies when the host's is set too).
    offload: move optimizer state to host RAM (and, for FSDP and ZeRO-3, parameters too;
      `offload_param=False` keeps ZeRO-3 parameters on the GPU).
    loss_token_fraction: share of positions whose logits are materialised (ms-swift's
      `use_logits_to_keep` computes them only where labels != -100); 1.0 = all (safe side).
    eval_batch_size: sequences per device in evaluation; None = batch_size.
    fsdp_state_dict_type: how FSDP checkpoints are gathered (FULL_STATE_DICT: all on rank 0's host RAM).
    fsdp_version: 1 = FullyShardedDataParallel (flat parameters), 2 = fully_shard (per-parameter DTensors).
    bnb_4bit_quant_storage: the dtype bitsandbytes packs 4-bit weights in; None = uint8 (transformers'
      BitsAndBytesConfig default). Under FSDP2 a uint8-packed weight is not sharded (backend/estimate/terms.py).
    upcast_non_quantized: QLoRA with PEFT's `prepare_model_for_kbit_training` (not ms-swift's way): every
      non-quantised weight (embeddings, lm_head, norms) in fp32, and so fp32 logits held by the output.
    trains_on_cpu: the device is the host: its terms (less CUDA's) are host RAM (backend/estimate/cpu_host.py).
    host_process_bytes / host_worker_bytes: one process's RSS beyond the other host terms, and its data-loader
      workers', as this machine's runs measured them (backend/estimate/calibration.py); None / 0: the
      textbook term. `calibration` says where they came from.
    """

    tuner: str = "lora"
    lora_rank: int = 8
    lora_alpha: int = 32  # does not change memory; kept so a request mirrors a profile
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("all-linear",)
    adapter_dtype: str | None = None
    quant_bits: int = 4
    double_quant: bool = True
    bnb_4bit_quant_storage: str | None = None
    precision: str = "bf16"
    torch_dtype: str | None = None
    distribution: str = "single"
    fsdp_strategy: str = "FULL_SHARD"
    fsdp_version: int = 1
    zero_stage: int = 2
    offload: bool = False
    offload_param: bool | None = None
    num_gpus: int = 1
    num_nodes: int = 1
    batch_size: int = 1
    max_length: int = 2048
    gradient_checkpointing: bool = True
    gpu_memory_bytes: int | None = None
    host_memory_bytes: int | None = None
    optimizer: str = "adamw"
    attn_implementation: str = "sdpa"
    liger_kernel: bool = False
    loss_token_fraction: float = 1.0
    fsdp_cpu_ram_efficient_loading: bool = True
    ds_overlap_comm: bool = False  # the workbench's DeepSpeed config; ms-swift's stock zero2.json uses True
    eval_batch_size: int | None = None
    fsdp_state_dict_type: str = "SHARDED_STATE_DICT"
    upcast_non_quantized: bool = False
    trains_on_cpu: bool = False
    host_process_bytes: int | None = None
    host_worker_bytes: int = 0
    calibration: tuple[str, ...] = field(default=(), compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # accept lists for convenience, store tuples so the request stays hashable
        if isinstance(self.target_modules, str):
            object.__setattr__(self, "target_modules", (self.target_modules,))
        else:
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        object.__setattr__(self, "attn_implementation",
                           _ATTN_ALIASES.get(self.attn_implementation, self.attn_implementation))
        _validate(self)

    # ------------------------------------------------------------ derived values

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def weight_dtype(self) -> str:
        """Dtype the (base) weights are stored in."""
        if self.torch_dtype:
            return self.torch_dtype
        return self.precision

    @property
    def mixed_precision(self) -> bool:
        return self.precision in ("fp16", "bf16")

    @property
    def compute_bytes(self) -> int:
        """Bytes per activation element: 16-bit under mixed precision, else the weights' dtype."""
        return 2 if self.mixed_precision else DTYPE_BYTES[self.weight_dtype]

    @property
    def is_adapter(self) -> bool:
        return self.tuner in ("lora", "qlora")

    @property
    def effective_fsdp_strategy(self) -> str:
        """FSDP falls back to NO_SHARD when there is nobody to shard with (it warns and switches)."""
        if self.fsdp_strategy == "HYBRID_SHARD":
            return "HYBRID_SHARD" if self.num_gpus > 1 else "NO_SHARD"
        return self.fsdp_strategy if self.world_size > 1 else "NO_SHARD"

    @property
    def offload_params(self) -> bool:
        """Whether parameters (not only optimizer state) live in host RAM."""
        if not self.offload:
            return False
        if self.distribution == "fsdp":
            return True  # FSDP's CPUOffload moves parameters, gradients and optimizer state together
        if self.distribution == "deepspeed" and self.zero_stage == 3:
            return True if self.offload_param is None else self.offload_param
        return False

    @property
    def resolved_targets(self) -> tuple[str, ...]:
        """LoRA target module names; 'all-linear' = every decoder Linear (not lm_head), kept as the
        word 'all-linear' because what it covers depends on the model (the shape resolves it)."""
        if not self.is_adapter:
            return ()
        names: list[str] = []
        for target in self.target_modules:
            name = "all-linear" if target.lower() in ("all-linear", "all_linear", "all") else target
            if name not in names:
                names.append(name)
        return tuple(names)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_modules"] = list(self.target_modules)
        data["calibration"] = list(self.calibration)
        data.pop("notes")
        return data


def _validate(req: EstimateRequest) -> None:
    """Raise ValueError naming the field and the allowed values."""
    _choice("tuner", req.tuner, TUNERS)
    _choice("precision", req.precision, PRECISIONS)
    if req.torch_dtype is not None:
        _choice("torch_dtype", req.torch_dtype, tuple(DTYPE_BYTES))
    if req.adapter_dtype is not None:
        _choice("adapter_dtype", req.adapter_dtype, tuple(DTYPE_BYTES))
    _choice("distribution", req.distribution, DISTRIBUTIONS)
    _choice("fsdp_strategy", req.fsdp_strategy, FSDP_STRATEGIES)
    _choice("fsdp_version", req.fsdp_version, FSDP_VERSIONS)
    if req.bnb_4bit_quant_storage is not None:
        _choice("bnb_4bit_quant_storage", req.bnb_4bit_quant_storage, QUANT_STORAGES)
    _choice("zero_stage", req.zero_stage, ZERO_STAGES)
    _choice("optimizer", req.optimizer, OPTIMIZERS)
    _choice("attn_implementation", req.attn_implementation, ATTN_IMPLEMENTATIONS)
    _choice("quant_bits", req.quant_bits, (4, 8))
    _choice("fsdp_state_dict_type", req.fsdp_state_dict_type, STATE_DICT_TYPES)
    if req.eval_batch_size is not None and (not isinstance(req.eval_batch_size, int) or req.eval_batch_size < 1):
        raise ValueError(f"eval_batch_size must be a positive integer, got {req.eval_batch_size!r}")
    for name in ("lora_rank", "num_gpus", "num_nodes", "batch_size", "max_length"):
        value = getattr(req, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0.0 <= req.lora_dropout < 1.0:
        raise ValueError(f"lora_dropout must be in [0, 1), got {req.lora_dropout!r}")
    if not 0.0 < req.loss_token_fraction <= 1.0:
        raise ValueError(f"loss_token_fraction must be in (0, 1], got {req.loss_token_fraction!r}")
    for name in ("gpu_memory_bytes", "host_memory_bytes"):
        value = getattr(req, name)
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    if req.distribution == "single" and req.world_size != 1:
        raise ValueError("distribution 'single' runs one process on one GPU: use num_gpus=1 num_nodes=1, "
                         "or ddp / fsdp / deepspeed for more GPUs")
    if req.offload and req.distribution in ("single", "ddp"):
        raise ValueError("offload needs distribution fsdp or deepspeed (single/DDP cannot offload)")
    if req.offload and req.distribution == "deepspeed" and req.zero_stage == 0:
        raise ValueError("offload needs ZeRO stage 1, 2 or 3")
    # any module name the model has may be targeted (Phi-3's qkv_proj, GPT-NeoX's query_key_value);
    # the shape resolves them. lm_head / embeddings are not sized as adapter targets.
    unknown = [t for t in req.resolved_targets if not _MODULE_NAME.fullmatch(t) or t in _NOT_TARGETS]
    if unknown:
        raise ValueError(f"unknown target module(s) {', '.join(unknown)}; use all-linear or linear layer "
                         f"names of the model (e.g. {', '.join(LINEAR_MODULES)})")
    if req.is_adapter and not req.resolved_targets:
        raise ValueError("target_modules is empty: LoRA needs at least one module (e.g. all-linear)")


def _choice(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
