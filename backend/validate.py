"""Pre-launch checks: profile + hardware -> every problem at once, each with field, why and fix.

Errors block a launch; warnings are shown and allowed. Each rule is a small function so a
reader can find the one that fired by its field name.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.hardware import HardwareInfo
from backend.paths import BUILTIN_DATASETS, BUILTIN_PREFIX, is_builtin, looks_local
from backend.profile import LaunchProfile
from backend.refs import RUN_PREFIX, local_path, resolve_model_ref

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    field: str
    severity: Severity
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.severity}: [{self.field}] {self.message} Fix: {self.fix}"


Rule = Callable[[LaunchProfile, HardwareInfo], Iterator[Problem]]
# a rule about the profile's folders (base_dir: the profile's folder, for relative paths)
PathRule = Callable[[LaunchProfile, Path | None], Iterator[Problem]]
RULES: list[Rule] = []
PATH_RULES: list[PathRule] = []


def rule(func: Rule) -> Rule:
    RULES.append(func)
    return func


def register_rules(rules: Iterable[Rule] = (), path_rules: Iterable[PathRule] = ()) -> None:
    """Rules of the floors above (the [watch]/[notify] keys, output_dir's owner), registered by
    backend.runs.startup at CLI and TUI start-up; registering one twice keeps one."""
    RULES.extend(r for r in rules if r not in RULES)
    PATH_RULES.extend(r for r in path_rules if r not in PATH_RULES)


def validate(profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None = None, *,
             ask_data: bool = False) -> list[Problem]:
    """All problems of `profile` on `hardware`, errors first. `ask_data`: have swift read the datasets
    (a child process, cached); otherwise only an already known answer about them is used."""
    problems = [p for check in RULES for p in check(profile, hardware)]
    problems += list(_paths_exist(profile, base_dir))
    problems += [p for check in PATH_RULES for p in check(profile, base_dir)]
    problems += list(_host_memory(profile, hardware, base_dir))
    problems += list(_experts_untouched(profile, base_dir))
    problems += list(_names_libraries_know(profile, base_dir, ask=ask_data))
    hostile = list(_dataset_files(profile, base_dir, read=ask_data))
    problems += hostile
    # swift reads the data only once the model and the data themselves are sound (no child for `--help`);
    # a FIFO or a symlink loop is never handed on at all (even the cache key's read would block on it)
    unsound = any(p.severity == "error" and p.field.startswith(("model", "data", "template")) for p in problems)
    if not hostile:
        problems += list(_data_as_swift_reads_it(profile, base_dir, ask_data and not unsound))
    return sorted(problems, key=lambda p: p.severity != "error")


def _data_as_swift_reads_it(profile: LaunchProfile, base_dir: Path | None, ask: bool) -> Iterator[Problem]:
    """Unreadable/empty datasets (errors), dropped, over-long and untrained rows (warnings): #12."""
    from backend.oracle.swift_data import profile_data_problems

    for field, severity, message, fix in profile_data_problems(profile, base_dir, ask=ask):
        yield Problem(field, severity, message, fix)  # type: ignore[arg-type]


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def _on_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> bool:
    return profile.distribution.device == "cpu" or (profile.distribution.device == "auto" and not hardware.has_cuda)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------- precision


@rule
def _fp16_and_bf16(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.fp16 and profile.precision.bf16:
        yield Problem("precision.fp16", "error", "fp16 and bf16 are both on; a run uses one mixed precision.",
                      "Turn one off: bf16 on Ampere or newer GPUs, fp16 (with loss scaling) on older ones.")


@rule
def _bf16_needs_hardware(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if not profile.precision.bf16 or _on_cpu(profile, hardware):
        return
    if hardware.has_cuda and not hardware.bf16_ready:
        names = ", ".join(f"{g.name} (sm {g.compute_capability})" for g in hardware.gpus)
        yield Problem("precision.bf16", "error",
                      f"bf16 asked but this machine is not bf16-ready (needs CUDA >= 11, compute capability "
                      f">= 8.0, NCCL >= 2.10); found: {names}, CUDA driver {hardware.cuda_driver_version}.",
                      "Use fp16 with dynamic loss scaling, or fp32.")


@rule
def _tf32_needs_ampere(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.tf32 and (_on_cpu(profile, hardware) or not hardware.bf16_ready):
        yield Problem("precision.tf32", "error",
                      "TF32 needs an Ampere or newer NVIDIA GPU; transformers refuses it elsewhere.",
                      "Set tf32 = false.")


@rule
def _fp16_on_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.fp16 and _on_cpu(profile, hardware):
        yield Problem("precision.fp16", "warning",
                      "fp16 on CPU: the workbench runs fp16 autocast with a CPU GradScaler (real dynamic loss "
                      "scaling), slower than fp32 on most CPUs.",
                      "Fine for learning how loss scaling behaves; use fp32 or bf16 for speed.")


@rule
def _overflow_injection_needs_fp16(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.debug.inject_overflow_steps and not profile.precision.fp16:
        yield Problem("debug.inject_overflow_steps", "error",
                      "an injected overflow is only caught by an fp16 loss scaler; without one the non-finite "
                      "gradient would reach the weights.",
                      "Set precision.fp16 = true, or empty inject_overflow_steps.")


# ---------------------------------------------------------------- tuner


@rule
def _qlora_needs_bitsandbytes(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.tuner.type == "qlora" and not _installed("bitsandbytes"):
        yield Problem("tuner.type", "error", "QLoRA needs bitsandbytes, which is not installed.",
                      "pip install bitsandbytes, or use tuner type lora.")


@rule
def _fsdp_qlora_storage(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    t = profile.tuner
    if profile.distribution.strategy == "fsdp" and t.type == "qlora" and t.quant_bits == 4:
        if t.bnb_4bit_quant_storage != t.bnb_4bit_compute_dtype:
            yield Problem("tuner.bnb_4bit_quant_storage", "error",
                          f"FSDP + QLoRA shards the packed 4-bit weights as {t.bnb_4bit_quant_storage or 'uint8'}; "
                          f"FSDP needs every parameter of a unit in one dtype, the compute dtype "
                          f"{t.bnb_4bit_compute_dtype}.",
                          f"Set bnb_4bit_quant_storage = \"{t.bnb_4bit_compute_dtype}\".")


@rule
def _lora_targets(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.tuner.type != "full" and not profile.tuner.target_modules:
        yield Problem("tuner.target_modules", "error", "LoRA needs at least one target module.",
                      "Use [\"all-linear\"] or names such as q_proj, v_proj.")


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
def _fsdp_on_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.distribution.strategy == "fsdp" and _on_cpu(profile, hardware):
        yield Problem("distribution.strategy", "warning",
                      "FSDP does not run through swift/accelerate on CPU: the launch degrades to plain DDP "
                      "(gloo), nothing is sharded.",
                      "Use a GPU machine for FSDP, or choose ddp here.")


@rule
def _deepspeed_checks(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    d = profile.distribution
    if d.strategy != "deepspeed":
        return
    if not _installed("deepspeed"):
        yield Problem("distribution.strategy", "error", "DeepSpeed is not installed.",
                      "pip install deepspeed (on the GPU machine), or use fsdp.")
    if _on_cpu(profile, hardware):
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
    if _on_cpu(profile, hardware) or not hardware.has_cuda:
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
    if _on_cpu(profile, hardware) and hardware.cpu_count and d.nproc_per_node > hardware.cpu_count:
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


def _host_memory(profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None) -> Iterator[Problem]:
    """The planner's host-RAM forecast per machine against this machine's RAM, when the model's config.json
    is on disk (the shape is read from it and the planner's cache; no child process)."""
    from backend.estimate.exact import cached_shape
    from backend.estimate.fit import estimate
    from backend.estimate.from_profile import config_dir_for, request_from_profile
    from backend.estimate.shape import ConfigError
    from backend.units import gib

    if not hardware.ram_total_bytes:
        return
    try:
        shape = cached_shape(config_dir_for(profile.model.source, base_dir),
                             tuple(profile.tuner.target_modules) or ("all-linear",))
        needed = estimate(shape, request_from_profile(profile, shape)).host_total_bytes
    except (ConfigError, OSError, ValueError, RecursionError):  # no readable config.json: other rules say why
        return
    if needed > hardware.ram_total_bytes:
        processes, has = profile.distribution.nproc_per_node, gib(hardware.ram_total_bytes)
        yield Problem("distribution.nproc_per_node", "error",
                      f"the forecast needs about {gib(needed)} GiB of host RAM on this machine ({processes} "
                      f"process(es)); it has {has} GiB.",
                      "Use fewer processes per machine, a smaller model or batch, or a machine with more RAM "
                      "(`workbench estimate` shows the terms).")


def _experts_untouched(profile: LaunchProfile, base_dir: Path | None) -> Iterator[Problem]:
    """`all-linear` on a mixture-of-experts model whose experts transformers fuses into 3-D tensors (Mixtral,
    Qwen-MoE, DeepSeek): swift's find_all_linears sees no nn.Linear in them, so only attention is trained.
    Said from the model-shape oracle's cached answer only (no child process here)."""
    from backend.estimate.exact import cached_answer, shape_from
    from backend.estimate.from_profile import config_dir_for
    from backend.estimate.shape import EXACT, ConfigError, read_config

    t = profile.tuner
    if t.type == "full" or "all-linear" not in t.target_modules or "target_parameters" in profile.extra_swift_args:
        return
    try:
        config, file = read_config(config_dir_for(profile.model.source, base_dir))
        answer = cached_answer(config)
        shape = shape_from(config, answer, str(file))
    except (ConfigError, OSError, ValueError, RecursionError):  # no readable config.json: other rules say why
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
    from backend.managed_flags import managed_flags
    from backend.oracle import OracleError
    from backend.swift_schema import extra_problems, load_schema

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


# ---------------------------------------------------------------- files


def _paths_exist(profile: LaunchProfile, base_dir: Path | None) -> Iterator[Problem]:
    source = profile.model.source
    if is_builtin(source):
        from backend.demo.build import BUILTIN_MODELS

        if source.removeprefix(BUILTIN_PREFIX) not in BUILTIN_MODELS:
            yield Problem("model.source", "error", f"unknown built-in model {source!r}.",
                          f"Use one of: {', '.join('builtin:' + n for n in BUILTIN_MODELS)}.")
    elif source.startswith(RUN_PREFIX):
        found = resolve_model_ref(source, base_dir)
        if found.problem:
            yield Problem("model.source", "error", found.problem,
                          "Merge the run's LoRA first (`workbench merge RUN`), or pick another model.")
    elif looks_local(source) and not _resolve(source, base_dir).is_dir():
        yield Problem("model.source", "error", f"model folder {source!r} does not exist.",
                      "Give an existing folder holding config.json, or a hub id.")
    for key in ("train", "val"):
        for ref in getattr(profile.data, key):
            path_part = ref.partition("#")[0]
            if is_builtin(ref):
                if ref.removeprefix(BUILTIN_PREFIX) not in BUILTIN_DATASETS:
                    yield Problem(f"data.{key}", "error", f"unknown built-in dataset {ref!r}.",
                                  f"Use one of: {', '.join('builtin:' + n for n in BUILTIN_DATASETS)}.")
            elif looks_local(path_part) and not _resolve(path_part, base_dir).exists() and \
                    not os.path.islink(_resolve(path_part, base_dir)):  # swift reads folders too; a loop: below
                yield Problem(f"data.{key}", "error", f"dataset file {path_part!r} does not exist.",
                              "Give an existing .jsonl/.json/.csv/.txt file or dataset folder, or a hub id.")


def _dataset_files(profile: LaunchProfile, base_dir: Path | None, *, read: bool) -> Iterator[Problem]:
    """Local datasets that must not be opened (a FIFO, a symlink loop) and, with `read` (before swift is
    asked to read them), files with a line too long or a row nested too deep: #29."""
    from backend.data_files import file_problem, hostile_dataset

    for key in ("train", "val"):
        for ref in getattr(profile.data, key):
            path_part = ref.partition("#")[0]
            if is_builtin(ref) or not path_part:
                continue
            path = _resolve(path_part, base_dir).absolute()
            problem = hostile_dataset([str(path)]) if read else file_problem(path)
            if problem:
                yield Problem(f"data.{key}", "error", f"{problem}.",
                              "Give a regular .jsonl/.json/.csv/.txt file with one row a line (rows nest at most "
                              "100 levels, lines stay under 32 MiB).")


def _resolve(ref: str, base_dir: Path | None) -> Path:
    return local_path(ref, base_dir)  # the one resolver: backend.refs


@rule
def _env_section(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """[env]: names a profile key decides are refused; secrets must be in the environment at launch."""
    import os

    from backend.command import RESERVED_ENV
    from backend.swift_schema import is_secret_name

    for key in profile.env:
        if key in RESERVED_ENV or key.startswith("WORKBENCH_"):
            owner = RESERVED_ENV.get(key, "the workbench")
            yield Problem(f"env.{key}", "error", f"{key} is set by {owner}; a second value would fight it.",
                          "Remove it from [env]" + (f" and set {owner}." if "." in owner else "."))
        elif is_secret_name(key) and not os.environ.get(key):
            yield Problem(f"env.{key}", "warning", f"{key} is a secret read from your environment at launch, "
                          "and it is not set there now.", f"export {key}=... in the shell that launches.")


@rule
def _quant_method_unset(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.tuner.type == "qlora" and profile.tuner.quant_method is None:
        yield Problem("tuner.quant_method", "warning",
                      "quant_bits without quant_method: ms-swift 4.6 builds no quantization config, so the base "
                      "model is not quantized (plain LoRA memory).", "Set quant_method = \"bnb\" for QLoRA.")


@rule
def _deepspeed_config(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    from backend.command import deepspeed_reference
    from backend.swift_schema import load_schema

    config = profile.distribution.deepspeed.config
    if profile.distribution.strategy != "deepspeed" or not config:
        return
    reference = deepspeed_reference(config, None)
    if reference != config or config.endswith(".json"):
        if not Path(reference).is_file() and not Path(config).expanduser().is_file():
            yield Problem("distribution.deepspeed.config", "error", f"DeepSpeed config {config!r} does not exist.",
                          "Give a JSON file, or one of swift's presets (zero0 ... zero3_offload).")
        return
    schema = load_schema()
    presets = schema.deepspeed_presets if schema else ()
    if presets and config not in presets:
        yield Problem("distribution.deepspeed.config", "error", f"{config!r} is not one of swift's presets.",
                      f"Use one of {', '.join(presets)}, or a JSON file path.")


# ---------------------------------------------------------------- hostile values (#14, #29)

FLAG_LIKE_FIX = {"model.source": "Give a model folder, a hub id or builtin:tiny-qwen2.",
                 "data.train": "Give a dataset file, a hub id or builtin:self-cognition.",
                 "tuner.target_modules": "Give module names (q_proj, v_proj) or \"all-linear\"; a swift flag goes "
                                         "in its own profile key or in extra_swift_args.",
                 "output.report_to": "Give tracker names (none, tensorboard, wandb ...); a swift flag goes in its own "
                                     "profile key or in extra_swift_args."}


@rule
def _flag_like_values(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """A value beginning with '-' (a list entry `--tuner_type=full`, a template `-x`) would reach swift as a
    flag of its own: the builder refuses it, and this names its key."""
    from backend.command import flag_like_values

    for found in flag_like_values(profile, hardware):
        key = found.flag.key or found.flag.name
        fix = FLAG_LIKE_FIX.get(key.replace("data.val", "data.train"), "Remove the leading '-'; a swift flag goes "
                                "in its own profile key or in extra_swift_args.")
        yield Problem(key, "error", f"{found.value!r} begins with '-': swift's parser would read it as a flag of "
                      f"its own, not as a value of --{found.flag.name}.", fix)


# ---------------------------------------------------------------- names only the libraries know (#29)


def _names_libraries_know(profile: LaunchProfile, base_dir: Path | None, *, ask: bool) -> Iterator[Problem]:
    """report_to against transformers' trackers, target_modules against swift's keywords and the model's own
    module names. swift's parser takes any string for both; an unknown one fails (or is ignored) only once the
    model is loaded. Answers not known yet say nothing: the model's shape is only ever read from the cache."""
    from backend.oracle.library_names import known_names

    names = known_names(ask=ask)
    if names is None:
        return
    for tracker in profile.output.report_to:
        if tracker not in names.trackers and not tracker.startswith("-"):  # '-': _flag_like_values says why
            yield Problem("output.report_to", "error", f"{tracker!r} is not a tracker transformers knows.",
                          f"Use one of: {', '.join(names.trackers)}.")
    if profile.tuner.type != "full":
        yield from _target_modules(profile, base_dir, names.target_keywords)


def _target_modules(profile: LaunchProfile, base_dir: Path | None, keywords: tuple[str, ...]) -> Iterator[Problem]:
    import difflib

    asked = [t for t in profile.tuner.target_modules if t not in keywords and not t.startswith("-")]
    paths = _module_paths(profile, base_dir) if asked else None
    if not paths:
        return
    leaves = sorted({path.rsplit(".", 1)[-1] for path in paths})
    for target in asked:
        if not _names_a_module(target, paths):
            close = difflib.get_close_matches(target.rsplit(".", 1)[-1], leaves + list(keywords), n=4, cutoff=0.5)
            yield Problem("tuner.target_modules", "error",
                          f"{target!r} is neither a module of this model nor one of swift's keywords "
                          f"({', '.join(keywords)}); PEFT would refuse it once the model is loaded.",
                          f"Closest names: {', '.join(close)}." if close else
                          f"Use module names of this model: {', '.join(leaves)}.")


def _module_paths(profile: LaunchProfile, base_dir: Path | None) -> list[str] | None:
    """The paths of the model's weight-holding modules (indices as '*'), from the cached shape answer only."""
    from backend.estimate.exact import cached_answer
    from backend.estimate.from_profile import config_dir_for
    from backend.estimate.shape import ConfigError, read_config

    try:
        config, _ = read_config(config_dir_for(profile.model.source, base_dir))
        answer = cached_answer(config) or {}
    except (ConfigError, OSError, ValueError, RecursionError):  # no readable config.json: other rules say why
        return None
    paths = answer.get("module_paths")
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) and answer.get("known") else None


def _names_a_module(target: str, paths: list[str]) -> bool:
    """PEFT's rule for a list entry: the module's path is the entry or ends with '.' + the entry."""
    pattern = re.sub(r"(?<![^.])\d+(?=\.|$)", "*", target)
    return any(path == pattern or path.endswith("." + pattern) for path in paths)


MAX_NAME_CHARS = 100
SEED_LIMIT = 2**32  # numpy's and swift's seeds are 32-bit


def _non_finite(value: object, where: str) -> Iterator[str]:
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        yield where
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            yield from _non_finite(item, f"{where}[{number}]")


@rule
def _hostile_values(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """Numbers that are not numbers, values that swift would read as flags, names that would act on
    the terminal: each is an error naming its field."""
    import unicodedata

    for where in _non_finite(profile.model_dump(), ""):
        yield Problem(where, "error", f"{where} is not a finite number.", "Give a finite number.")
    name = profile.name
    if len(name) > MAX_NAME_CHARS:
        yield Problem("name", "error", f"the name is {len(name)} characters long (at most {MAX_NAME_CHARS}).",
                      "Give a shorter name.")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        yield Problem("name", "error", "the name holds control or invisible characters (escape sequences, "
                      "newlines, direction overrides).", "Use letters, digits, spaces and punctuation.")
    seed = profile.training.seed
    if not 0 <= seed < SEED_LIMIT:
        yield Problem("training.seed", "error", f"seed {seed} is outside 0 .. 2**32-1.", "Give a smaller seed.")
    if profile.training.max_steps == 0:
        yield Problem("training.max_steps", "error", "max_steps = 0 trains nothing (swift still runs one step).",
                      "Give a step count, or -1 to train by num_train_epochs.")
    for key in ("train", "val"):
        for ref in getattr(profile.data, key):
            path_part = ref.partition("#")[0]
            if not ref.startswith("-") and not looks_local(path_part) and any(c.isspace() for c in ref) and \
                    not path_part.endswith((".jsonl", ".json", ".csv", ".txt", ".parquet")):
                yield Problem(f"data.{key}", "error", f"dataset {ref!r} is neither an existing file nor a hub id "
                              "(a hub id has no spaces).", "Give the path of a .jsonl/.json/.csv file or a hub id.")
