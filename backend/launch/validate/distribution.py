"""Rules on the machines and processes: GPUs asked and present, single/DDP/FSDP/DeepSpeed combinations,
host memory, experts left untrained, several machines, extra swift flags."""

from __future__ import annotations

from collections.abc import Iterator

from backend.hardware.machine import HardwareInfo
from backend.launch.validate.core import Problem, installed, on_cpu, rule
from backend.models.resolved import ResolvedProfile
from backend.profile import LaunchProfile

# ---------------------------------------------------------------- distribution


@rule
def _gpu_asked_without_gpu(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.distribution.device != "cuda" or hardware.has_cuda:
        return
    if profile.distribution.world_size > 1:
        why = ("several processes asked on a machine without a GPU and without use_cpu: each process would run "
               "an independent training writing into one output folder.")
    else:
        why = "device = cuda, but no NVIDIA GPU was found."
    yield Problem("distribution.device", "error", why,
                  "Set device = \"auto\" or \"cpu\" (the launch then passes --use_cpu true and gloo).")


@rule
def _single_means_one(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if d.strategy == "single" and d.world_size > 1:
        yield Problem("distribution.strategy", "error",
                      f"strategy single with {d.world_size} processes.",
                      "Choose ddp, fsdp or deepspeed, or set nproc_per_node = 1.")
    if d.strategy == "ddp" and d.world_size == 1:
        yield Problem("distribution.nproc_per_node", "warning", "DDP with one process is a single-process run.",
                      "Raise nproc_per_node, or choose single.")


@rule
def _hybrid_needs_machines(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if d.strategy == "fsdp" and d.fsdp.sharding_strategy == "HYBRID_SHARD" and d.num_machines < 2:
        yield Problem("distribution.fsdp.sharding_strategy", "error",
                      "HYBRID_SHARD shards inside a machine and replicates across machines; on one machine it "
                      "is FULL_SHARD with extra communication groups.",
                      "Use FULL_SHARD, or set num_machines >= 2.")


@rule
def _fsdp2_strategies(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    f = profile.distribution.fsdp
    if profile.distribution.strategy == "fsdp" and f.version == 2 and f.sharding_strategy in ("NO_SHARD",
                                                                                               "HYBRID_SHARD"):
        yield Problem("distribution.fsdp.sharding_strategy", "error",
                      f"FSDP2 only knows whether to reshard after forward (FULL_SHARD / SHARD_GRAD_OP); "
                      f"{f.sharding_strategy} would silently become full sharding.",
                      "Use FULL_SHARD or SHARD_GRAD_OP with version 2, or version = 1.")


@rule
def _fsdpon_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.distribution.strategy == "fsdp" and on_cpu(profile, hardware):
        yield Problem("distribution.strategy", "warning",
                      "FSDP does not run through swift/accelerate on CPU: the launch degrades to plain DDP "
                      "(gloo), nothing is sharded.",
                      "Use a GPU machine for FSDP, or choose ddp here.")


@rule
def _deepspeed_checks(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if d.strategy != "deepspeed":
        return
    if not installed("deepspeed"):
        yield Problem("distribution.strategy", "error", "DeepSpeed is not installed.",
                      "pip install deepspeed (on the GPU machine), or use fsdp.")
    if on_cpu(profile, hardware):
        yield Problem("distribution.strategy", "error", "DeepSpeed ZeRO needs NVIDIA GPUs.",
                      "Use ddp on CPU, or run on a GPU machine.")
    if d.deepspeed.offload_param and d.deepspeed.stage != 3:
        yield Problem("distribution.deepspeed.offload_param", "error",
                      "Parameter offload exists only in ZeRO-3.", "Set stage = 3, or offload_param = false.")


@rule
def _gradient_checkpointing_conflicts(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d, tr = profile.distribution, profile.training
    if d.strategy == "fsdp" and d.fsdp.activation_checkpointing and tr.gradient_checkpointing:
        yield Problem("distribution.fsdp.activation_checkpointing", "error",
                      "FSDP activation checkpointing and training.gradient_checkpointing are both on; "
                      "transformers refuses the pair.",
                      "Keep one: FSDP's (wraps each unit) or gradient_checkpointing.")
    if d.strategy == "ddp" and d.world_size > 1 and tr.gradient_checkpointing and \
            tr.gradient_checkpointing_use_reentrant is not False:
        yield Problem("training.gradient_checkpointing_use_reentrant", "warning",
                      "Gradient checkpointing under DDP with reentrant checkpoints can fail with "
                      "'Expected to mark a variable ready only once'.",
                      "Set gradient_checkpointing_use_reentrant = false (or use DeepSpeed).")


@rule
def _gpu_count(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if on_cpu(profile, hardware) or not hardware.has_cuda:
        return
    present = {g.index for g in hardware.gpus}
    if len(set(d.gpu_ids)) != len(d.gpu_ids):
        yield Problem("distribution.gpu_ids", "error", f"GPU ids {d.gpu_ids} repeat an id.",
                      "List each GPU once.")
    missing = [i for i in d.gpu_ids if i not in present]
    if missing:
        yield Problem("distribution.gpu_ids", "error",
                      f"GPU ids {missing} do not exist; this machine has {sorted(present)}.",
                      "Pick ids from the GPU list.")
    available = len(d.gpu_ids) if d.gpu_ids else len(present)
    if d.nproc_per_node > available:
        yield Problem("distribution.nproc_per_node", "error",
                      f"{d.nproc_per_node} processes per machine asked, {available} GPU(s) available.",
                      f"Set nproc_per_node <= {available}.")
    if d.gpu_ids and len(d.gpu_ids) != d.nproc_per_node:
        yield Problem("distribution.gpu_ids", "warning",
                      f"{len(d.gpu_ids)} GPU ids for {d.nproc_per_node} processes; each process takes one GPU.",
                      "Make nproc_per_node equal the number of GPU ids.")


@rule
def _processes_and_ids_exist(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """More CPU processes than cores (0 cores: not known, a SLURM allocation), a negative GPU id, GPU ids on a
    machine without a GPU (#29)."""
    d = profile.distribution
    if on_cpu(profile, hardware) and hardware.cpu_count and d.nproc_per_node > hardware.cpu_count:
        yield Problem("distribution.nproc_per_node", "error",
                      f"{d.nproc_per_node} processes per machine on {hardware.cpu_count} CPU cores: each process "
                      f"loads the model and trains on its own core (and its own share of RAM).",
                      f"Set nproc_per_node <= {hardware.cpu_count}.")
    negative = [i for i in d.gpu_ids if i < 0]
    if negative:
        yield Problem("distribution.gpu_ids", "error", f"GPU ids {negative} are negative; ids count from 0.",
                      "Pick ids from the GPU list (nvidia-smi).")
    elif d.gpu_ids and not hardware.has_cuda:
        yield Problem("distribution.gpu_ids", "error",
                      f"GPU ids {d.gpu_ids} do not exist: this machine has no NVIDIA GPU.",
                      "Remove gpu_ids (a CPU run uses none), or launch on a GPU machine.")


def host_memory(profile: LaunchProfile, hardware: HardwareInfo, resolved: ResolvedProfile) -> Iterator[Problem]:
    """The planner's host-RAM forecast per machine against this machine's RAM, when the model's config.json
    is on disk (the shape is read from it and the planner's cache; no child process)."""
    from backend.core.units import gib
    from backend.estimate.fit import estimate
    from backend.estimate.from_profile import request_from_profile
    from backend.models.shape_exact import cached_shape
    from backend.models.shape_formula import ConfigError

    if not hardware.ram_total_bytes:
        return
    try:
        shape = cached_shape(resolved.config_dir(), tuple(profile.tuner.target_modules) or ("all-linear",))
        request = request_from_profile(profile, shape, base_dir=resolved.base_dir, on_cpu=on_cpu(profile, hardware))
        needed = estimate(shape, request).host_total_bytes
    except (LookupError, ConfigError, OSError, ValueError, RecursionError):  # no config.json: other rules say why
        return
    if needed > hardware.ram_total_bytes:
        processes, has = profile.distribution.nproc_per_node, gib(hardware.ram_total_bytes)
        yield Problem("distribution.nproc_per_node", "error",
                      f"the forecast needs about {gib(needed)} GiB of host RAM on this machine ({processes} "
                      f"process(es)); it has {has} GiB.",
                      "Use fewer processes per machine, a smaller model or batch, or a machine with more RAM "
                      "(`workbench estimate` shows the terms).")


def experts_untouched(profile: LaunchProfile, resolved: ResolvedProfile) -> Iterator[Problem]:
    """`all-linear` on a mixture-of-experts model whose experts transformers fuses into 3-D tensors (Mixtral,
    Qwen-MoE, DeepSeek): swift's find_all_linears sees no nn.Linear in them, so only attention is trained.
    Said from the model-shape oracle's cached answer only (no child process here)."""
    from backend.models.shape import EXACT
    from backend.models.shape_exact import cached_answer, shape_from
    from backend.models.shape_formula import ConfigError, read_config

    t = profile.tuner
    if t.type == "full" or "all-linear" not in t.target_modules or "target_parameters" in profile.extra_swift_args:
        return
    try:
        config, file = read_config(resolved.config_dir())
        answer = cached_answer(config)
        shape = shape_from(config, answer, str(file))
    except (LookupError, ConfigError, OSError, ValueError, RecursionError):  # no config.json: other rules say why
        return
    fused = sorted({e["path"] for k in (answer or {}).get("layer_kinds") or [] for e in k.get("experts") or []})
    if shape.source != EXACT or not shape.is_moe or not fused:
        return
    trained = sorted({lin.name for lin in shape.targeted(("all-linear",))})
    lora = shape.lora_params(t.lora_rank, ("all-linear",))
    yield Problem("tuner.target_modules", "warning",
                  f"all-linear on {shape.architecture} trains {', '.join(trained)} only: {lora:,} LoRA parameters "
                  f"at rank {t.lora_rank}; its experts ({shape.routed_expert_params:,} of {shape.total_params:,} "
                  f"parameters) are fused 3-D tensors, not linear modules, and stay untouched.",
                  "To train the experts too, name their tensors in [extra_swift_args]: target_parameters = "
                  "[" + ", ".join(f'"{path}"' for path in fused) + "] (swift's --target_parameters).")


@rule
def _multi_node(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if d.num_machines > 1 and not d.main_process_ip:
        yield Problem("distribution.main_process_ip", "error",
                      "Several machines need the address of machine 0.",
                      "Set main_process_ip to an address every machine can reach.")
    if d.machine_rank >= d.num_machines:
        yield Problem("distribution.machine_rank", "error",
                      f"machine_rank {d.machine_rank} with {d.num_machines} machine(s).",
                      f"Use a rank from 0 to {d.num_machines - 1}.")


@rule
def _extra_swift_args(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """extra_swift_args against swift's own parser (issue #11): names, types, choices, managed keys, secrets."""
    from backend.launch.managed_flags import managed_flags
    from backend.launch.swift_schema import extra_problems, load_schema
    from backend.oracle import OracleError

    if not profile.extra_swift_args:
        return
    try:
        schema = load_schema()
    except OracleError as err:
        schema = None
        yield Problem("extra_swift_args", "error", f"swift's argument list could not be read: {err}",
                      "Check that ms-swift imports (`workbench schema --swift` shows the details).")
    else:
        if schema is None:
            yield Problem("extra_swift_args", "warning",
                          "swift's argument list is not loaded yet; names and values are checked before launch.",
                          "Wait a moment, or run `workbench schema --swift` once.")
    for found in extra_problems(profile.extra_swift_args, schema, managed_flags(), command=profile.task):
        yield Problem(f"extra_swift_args.{found.key}", "error", found.message, found.fix)
