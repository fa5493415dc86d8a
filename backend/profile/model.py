"""The launch profile's typed model: one pydantic model of everything a fine-tune needs.

Field names follow ms-swift's argument names wherever one exists (`lora_rank`,
`per_device_train_batch_size`, `bnb_4bit_compute_dtype` ...) and accelerate's config
keys for the distribution block, so a user who knows those tools reads a profile at once.
Reading and writing the TOML file: backend/profile/toml_file.py; the schema table: profile_schema.py.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.core.safe_text import is_secret_name
from backend.profile.watch_section import NotifySection, WatchSection

Dtype = Literal["auto", "float32", "float16", "bfloat16"]
ComputeDtype = Literal["float32", "float16", "bfloat16"]


class _Section(BaseModel):
    """Base of every section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(_Section):
    source: str = Field(
        "builtin:tiny-qwen2",
        description="Local model folder, hub id (e.g. Qwen/Qwen2.5-7B-Instruct) or builtin:tiny-qwen2.",
    )
    model_type: str | None = Field(None, description="ms-swift model_type; needed when swift cannot infer it.")
    template: str | None = Field(None, description="ms-swift chat template; needed when swift cannot infer it.")
    torch_dtype: Dtype = Field("auto", description="dtype the weights are loaded in.")
    system: str | None = Field(None, description="Default system prompt.")
    model_author: str | None = Field(None, description="Author name filled into swift/self-cognition.")
    model_name: str | None = Field(None, description="Model name filled into swift/self-cognition.")


class DataSection(_Section):
    train: list[str] = Field(
        default_factory=lambda: ["builtin:self-cognition"],
        description="Training datasets: files (.jsonl/.json/.csv) or hub ids, '#N' samples N rows.",
    )
    val: list[str] = Field(default_factory=list, description="Validation datasets (same forms as train).")
    split_dataset_ratio: float = Field(
        0.0, ge=0.0, lt=1.0, description="Fraction of train held out for evaluation when val is empty."
    )


class TunerSection(_Section):
    type: Literal["full", "lora", "qlora"] = Field("lora", description="full fine-tune, LoRA, or QLoRA (4/8-bit base).")
    lora_rank: int = Field(8, ge=1, le=4096, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (scale = alpha / rank).")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA branch.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["all-linear"],
        description="Modules that get adapters: all-linear, or names such as q_proj v_proj.",
    )
    quant_bits: Literal[4, 8] = Field(4, description="QLoRA: bits of the frozen base weights.")
    quant_method: Literal["bnb", "hqq", "eetq", "quanto", "fp8"] | None = Field(
        None, description="QLoRA: quantisation library (bnb = bitsandbytes); unset = none passed (swift 4.6 then "
                          "builds no quantization config).")
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = Field("nf4", description="QLoRA: 4-bit data type.")
    bnb_4bit_use_double_quant: bool = Field(True, description="QLoRA: quantise the quantisation constants too.")
    bnb_4bit_compute_dtype: ComputeDtype = Field("bfloat16", description="QLoRA: dtype of the matmuls.")
    bnb_4bit_quant_storage: ComputeDtype | None = Field(
        None, description="QLoRA: storage dtype of packed weights; must equal the compute dtype under FSDP."
    )


class PrecisionSection(_Section):
    bf16: bool | None = Field(None, description="bf16 mixed precision (Ampere or newer GPU, or CPU); unset = "
                                                "swift's rule (bf16 for a bf16 model, fp16 for fp16/fp32 ones).")
    fp16: bool | None = Field(None, description="fp16 mixed precision with dynamic loss scaling; unset = swift's rule.")
    tf32: bool = Field(False, description="Allow TF32 matmuls on Ampere+ GPUs (fp32 range, 10-bit mantissa).")
    loss_scale_init: float = Field(65536.0, gt=0, description="fp16: initial dynamic loss scale.")
    loss_scale_growth_interval: int = Field(
        2000, ge=1, description="fp16: steps without overflow before the scale doubles."
    )

    @property
    def mode(self) -> Literal["fp32", "fp16", "bf16"]:
        if self.bf16:
            return "bf16"
        return "fp16" if self.fp16 else "fp32"


ShardingStrategy = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]


class FsdpSection(_Section):
    version: Literal[1, 2] = Field(1, description="FSDP version (2 = per-parameter sharding, fully_shard).")
    sharding_strategy: ShardingStrategy = Field("FULL_SHARD", description="What is sharded across processes.")
    cpu_offload: bool = Field(False, description="Keep parameters and optimizer state in host RAM.")
    auto_wrap_policy: Literal["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"] = Field(
        "TRANSFORMER_BASED_WRAP", description="How the model is split into FSDP units."
    )
    transformer_layer_cls_to_wrap: str | None = Field(
        None, description="Decoder layer class to wrap; detected from the model's architecture when empty."
    )
    min_num_params: int = Field(100_000_000, ge=1, description="SIZE_BASED_WRAP: parameters per unit.")
    activation_checkpointing: bool = Field(False, description="FSDP-native activation checkpointing.")
    state_dict_type: Literal["FULL_STATE_DICT", "SHARDED_STATE_DICT"] = Field(
        "SHARDED_STATE_DICT", description="How checkpoints are saved."
    )
    cpu_ram_efficient_loading: bool = Field(True, description="Only rank 0 loads weights into host RAM.")
    sync_module_states: bool = Field(True, description="Broadcast rank 0's weights (needed with the above).")
    use_orig_params: bool = Field(True, description="Keep original parameters (needed for LoRA).")
    forward_prefetch: bool = Field(False, description="Prefetch the next unit in forward.")
    backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"] = Field(
        "BACKWARD_PRE", description="When to prefetch the next unit in backward."
    )


class DeepSpeedSection(_Section):
    config: str | None = Field(
        None, description="swift's own preset (zero0, zero1, zero2, zero3, zero2_offload, zero3_offload) or a "
                          "DeepSpeed JSON file; unset = a JSON the workbench writes from stage and offload.")
    stage: Literal[0, 1, 2, 3] = Field(2, description="ZeRO stage: 1 shards optimizer states, 2 also gradients, "
                                                      "3 also parameters (0 = plain data parallel).")
    offload_optimizer: bool = Field(False, description="Optimizer state in host RAM.")
    offload_param: bool = Field(False, description="ZeRO-3: parameters in host RAM.")


class DistributionSection(_Section):
    strategy: Literal["single", "ddp", "fsdp", "deepspeed"] = Field("single", description="How processes share the work.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when an NVIDIA GPU is present.")
    nproc_per_node: int = Field(1, ge=1, le=1024, description="Processes per machine (one per GPU).")
    gpu_ids: list[int] = Field(default_factory=list, description="GPUs to use (CUDA_VISIBLE_DEVICES); empty = all.")
    num_machines: int = Field(1, ge=1, description="Machines taking part.")
    machine_rank: int = Field(0, ge=0, description="This machine's rank (0 is the main one).")
    main_process_ip: str = Field("", description="Address of machine 0, reachable from every machine.")
    main_process_port: int = Field(29500, ge=1, le=65535, description="Rendezvous port on machine 0.")
    rdzv_backend: Literal["static", "c10d"] = Field("static", description="torch elastic rendezvous backend.")
    fsdp: FsdpSection = Field(default_factory=FsdpSection)
    deepspeed: DeepSpeedSection = Field(default_factory=DeepSpeedSection)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.num_machines


class TrainingSection(_Section):
    num_train_epochs: float | None = Field(None, gt=0, description="Epochs (ignored when max_steps > 0); "
                                                                   "unset = swift's default (3).")
    max_steps: int = Field(-1, ge=-1, description="Optimizer steps; -1 = decided by epochs.")
    per_device_train_batch_size: int = Field(1, ge=1, description="Sequences per process per step.")
    per_device_eval_batch_size: int = Field(1, ge=1, description="Sequences per process per eval step.")
    gradient_accumulation_steps: int | None = Field(
        None, ge=1, description="Micro-batches per optimizer step; unset = swift's default (16 / batch x GPUs).")
    learning_rate: float | None = Field(
        None, gt=0, description="Peak learning rate; unset = swift's default (1e-5 full, 1e-4 LoRA).")
    lr_scheduler_type: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        "cosine", description="Learning-rate schedule."
    )
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Fraction of steps spent warming up.")
    weight_decay: float = Field(0.1, ge=0.0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    max_length: int | None = Field(None, ge=8, description="Longest sequence in tokens; unset = the model's "
                                                           "(swift's default).")
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward to save memory.")
    gradient_checkpointing_use_reentrant: bool | None = Field(
        None, description="torch checkpoint use_reentrant; must be false under DDP."
    )
    logging_steps: int = Field(5, ge=1, description="Log loss every N steps.")
    eval_steps: int | None = Field(None, ge=1, description="Evaluate every N steps; unset = swift's (save_steps).")
    save_steps: int | None = Field(None, ge=1, description="Save a checkpoint every N steps; unset = swift's (500).")
    save_total_limit: int | None = Field(None, ge=1, description="Checkpoints kept; unset = all (swift's default).")
    metric_for_best_model: str | None = Field(
        None, description="Metric that picks the best checkpoint (kept by rotation, taken by merge/chat/infer); "
                          "unset = swift's (loss: the eval loss).")
    greater_is_better: bool | None = Field(
        None, description="Whether a higher metric is better; unset = swift's (false for a loss, else true).")
    early_stop_interval: int | None = Field(
        None, ge=1, description="swift's early stop: end training when the best metric has not improved for this "
                                "many evaluations (evaluate at the saves: eval_steps = save_steps); unset = off.")
    seed: int = Field(42, description="Random seed.")
    dataloader_num_workers: int | None = Field(
        None, ge=0, description="Data loader worker processes; unset = swift's default (1; 0 saves ~420 MB on CPU).")


class OutputSection(_Section):
    output_dir: str = Field("", description="Where swift writes checkpoints; empty = inside the run folder.")
    report_to: list[str] = Field(default_factory=lambda: ["none"], description="Trackers: none, tensorboard, wandb ...")


class DebugSection(_Section):
    inject_overflow_steps: list[int] = Field(
        default_factory=list, description="fp16: make the gradient non-finite at these optimizer steps."
    )
    inject_nan_steps: list[int] = Field(
        default_factory=list, description="Make the loss NaN at these optimizer steps (to try the watchdog)."
    )


class RunSection(_Section):
    save_on_term: bool = Field(
        False, description="SIGTERM to the trainer (or its supervisor) saves a checkpoint at the end of the step, "
                           "then stops cleanly, as SIGUSR1 always does (on by default in `workbench export slurm`).")
    auto_resume: bool = Field(
        False, description="A queued run cut by a reboot (found `unknown`, recorded in an earlier boot) is resumed by "
                           "the queue keeper from its newest complete checkpoint, with an alert each time.")
    auto_resume_max: int = Field(3, ge=1, description="Most automatic resumes of one run (auto_resume).")


class QueueSection(_Section):
    max_parallel: int = Field(1, ge=1, description="Queued runs at most running at once when this one is admitted.")
    memory_margin: float = Field(
        0.15, ge=0.0, le=4.0, description="Admission: free memory must cover the forecast plus this fraction of it.")
    oom_retry: int = Field(
        0, ge=0, le=8, description="A queued run failed by CUDA out of memory is queued again (this many times) with "
                                   "half the micro-batch and twice the accumulation: the same global batch.")
    share_gpus: bool = Field(False, description="Admission may put this run on a GPU a queued run already uses.")


class EvalSection(_Section):
    prompts: str | None = Field(
        None, description="Golden prompts: a jsonl of {\"messages\": [...]} rows (path relative to the profile); the "
                          "last assistant message, if any, is the reference answer. Each checkpoint answers them "
                          "greedily (`workbench checkpoints RUN --golden`); unset = none.")
    max_new_tokens: int = Field(64, ge=1, le=32768, description="Golden prompts: most tokens of each answer.")
    dataset: str | None = Field(
        None, description="`swift eval` dataset (`e` in the scoreboard, `workbench eval RUN`): a local jsonl of "
                          "question-answer {\"query\", \"response\"} or multiple-choice {\"question\", \"A\", "
                          "\"B\", ..., \"answer\"} rows (path relative to the profile), scored offline by "
                          "EvalScope against the base model; unset = none.")


SweepValue = str | int | float | bool


ScalarArg = str | int | float | bool | list[str]


class LaunchProfile(BaseModel):
    """Everything needed to launch one fine-tune."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field("untitled", min_length=1, description="Short name shown in run lists.")
    description: str = Field("", description="What this profile is for.")
    task: Literal["sft", "pt"] = Field("sft", description="swift sft (fine-tuning) or swift pt (pre-training).")
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    tuner: TunerSection = Field(default_factory=TunerSection)
    precision: PrecisionSection = Field(default_factory=PrecisionSection)
    distribution: DistributionSection = Field(default_factory=DistributionSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    output: OutputSection = Field(default_factory=OutputSection)
    run: RunSection = Field(default_factory=RunSection)
    queue: QueueSection = Field(default_factory=QueueSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    sweep: dict[str, list[SweepValue]] = Field(
        default_factory=dict, description="`workbench queue add` expands this grid into one queued run per "
                                          "combination: \"training.learning_rate\" = [1e-4, 2e-4] (dotted keys).")
    debug: DebugSection = Field(default_factory=DebugSection)
    watch: WatchSection = Field(default_factory=WatchSection)
    notify: NotifySection = Field(default_factory=NotifySection)
    extra_swift_args: dict[str, ScalarArg] = Field(
        default_factory=dict, description="Further `swift sft` arguments, passed as --key=value (checked against "
                                          "swift's own parser: `workbench schema --swift`)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of the run (NCCL_*, MAX_PIXELS ...). Secrets "
                                          "(names like *_TOKEN, *_API_KEY) are listed with an empty value and "
                                          "taken from your environment at launch, never stored.")

    @model_validator(mode="after")
    def _extra_args_are_names(self) -> LaunchProfile:
        for key in self.extra_swift_args:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", key):
                raise ValueError(f"extra_swift_args key {key!r} is not a swift argument name (lower_snake_case)")
        for key, value in self.env.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env name {key!r} is not an environment variable name")
            if value and is_secret_name(key):
                raise ValueError(f"env {key} looks like a secret: write {key} = \"\" and set it in your environment "
                                 f"(it is read at launch, never stored)")
        return self
