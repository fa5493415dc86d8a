"""The launch profile: one typed model of everything a fine-tune needs, stored as TOML.

Field names follow ms-swift's argument names wherever one exists (`lora_rank`,
`per_device_train_batch_size`, `bnb_4bit_compute_dtype` ...) and accelerate's config
keys for the distribution block, so a user who knows those tools reads a profile at once.

Files are saved atomically (temporary file + rename) and only the values that differ
from the defaults are written, so a profile shows what is special about it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import tomlkit
import tomlkit.exceptions
import tomlkit.items
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backend.fs import write_bytes_atomic, write_text_atomic  # noqa: F401 (re-exported for old callers; use backend.fs)
from backend.profile_watch import NotifySection, WatchSection
from backend.safe_text import is_secret_name

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


# ---------------------------------------------------------------- errors


class ProfileProblem(BaseModel):
    """One thing wrong with a profile file."""

    file: str
    key: str = ""
    line: int | None = None
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        key = f" [{self.key}]" if self.key else ""
        return f"{where}:{key} {self.message}"


class ProfileError(Exception):
    """A profile could not be read; carries every problem found."""

    def __init__(self, problems: list[ProfileProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


# ---------------------------------------------------------------- load / save


MAX_PROFILE_BYTES = 1_000_000
NESTED_TOO_DEEP = "values nested too deeply to read (thousands of levels); a profile needs a few"


def load_profile(path: str | Path) -> LaunchProfile:
    """Read and validate a TOML profile; raise ProfileError naming file, key and line."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_PROFILE_BYTES:  # (#14) never read an unbounded file into memory
            raise ProfileError([ProfileProblem(file=str(path), message=(
                f"{path.stat().st_size:,} bytes: too large for a profile (at most {MAX_PROFILE_BYTES:,})"))])
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError([ProfileProblem(file=str(path), message="no such file; check the path")]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError([ProfileProblem(file=str(path), message=f"cannot read: {err}")]) from None
    return parse_profile(text, source=str(path))


def parse_profile(text: str, source: str = "<profile>") -> LaunchProfile:
    try:
        data = tomllib.loads(text)
    except RecursionError:  # (#14) arrays/tables nested thousands deep
        raise ProfileError([ProfileProblem(file=source, message=NESTED_TOO_DEEP)]) from None
    except tomllib.TOMLDecodeError as err:
        # Python < 3.14 keeps the position only in the message: "(at line 2, column 7)"
        found = re.search(r"at line (\d+)", str(err))
        line = getattr(err, "lineno", None) or (int(found.group(1)) if found else None)
        raise ProfileError([ProfileProblem(file=source, line=line, message=f"not valid TOML: {err}")]) from None
    try:
        return LaunchProfile.model_validate(data)
    except RecursionError:
        raise ProfileError([ProfileProblem(file=source, message=NESTED_TOO_DEEP)]) from None
    except ValidationError as err:
        raise ProfileError(_problems_from_validation(err, text, source)) from None


def profile_to_toml(profile: LaunchProfile) -> str:
    """Canonical TOML: only non-default values, sections in schema order."""
    return tomlkit.dumps(_canonical_document(profile))


def _canonical_document(profile: LaunchProfile, always: dict[str, tuple[str, ...]] | None = None
                        ) -> tomlkit.TOMLDocument:
    data = profile.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
    full = profile.model_dump(mode="json")
    # the keys a reader looks for first are written even when they hold the default
    always = ALWAYS_WRITTEN if always is None else always
    ordered: dict[str, Any] = {"name": profile.name}
    for key, value in full.items():
        if key in data or key in always:
            section = data.get(key, {} if isinstance(value, dict) else value)
            if isinstance(section, dict):
                for sub in always.get(key, ()):
                    section = {sub: value[sub], **section}
            ordered[key] = section
    document = tomlkit.document()
    for key, value in ordered.items():
        document.add(key, _toml_item(value))
    return document


def _toml_item(value: Any) -> Any:
    """A value as the canonical file writes it: text with line breaks as a multi-line string, a
    non-empty list one element a line, a mapping as a [table]."""
    if isinstance(value, dict):
        table = tomlkit.table()
        for key, sub in value.items():
            table.add(key, _toml_item(sub))
        return table
    if isinstance(value, str) and "\n" in value:
        return _multiline_string(value)
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(_toml_item(v) for v in value)
        return array.multiline(bool(value))
    return tomlkit.item(value)


def _multiline_string(value: str) -> tomlkit.items.String:
    """\"\"\" then a line break, the text from the line's start (TOML drops that first line break)."""
    raw = tomlkit.items.String.from_raw(value, tomlkit.items.StringType.MLB)
    text = raw.as_string()[3:-3]
    return tomlkit.items.String(tomlkit.items.StringType.MLB, value, text if text.startswith("\n") else "\n" + text,
                                tomlkit.items.Trivia())


ALWAYS_WRITTEN: dict[str, tuple[str, ...]] = {"model": ("source",), "data": ("train",), "tuner": ("type",)}


def save_profile(profile: LaunchProfile, path: str | Path, *, layout: str | Path | None = None) -> Path:
    """Write atomically: readers see the old file or the new one, never half of one.

    `layout`: the user's file whose comments, key order and formatting the save keeps (the TUI
    passes the file the profile came from): only the values that changed are rewritten, new ones
    added, those set back to their default dropped. None, or a file that cannot be read as TOML:
    the canonical form."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = _layout_text(Path(layout)) if layout is not None else None
    write_text_atomic(path, profile_text_over(profile, existing))
    return path


def _layout_text(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_PROFILE_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def profile_text_over(profile: LaunchProfile, existing: str | None) -> str:
    """The profile written over an existing file's text, keeping what the user wrote around the values."""
    if not existing:
        return profile_to_toml(profile)
    try:
        document = tomlkit.parse(existing)
    except (tomlkit.exceptions.ParseError, RecursionError, ValueError):  # not TOML: nothing to keep
        return profile_to_toml(profile)
    # defaults the canonical form always writes are not added to a file that leaves them out
    _update(document, _canonical_document(profile, always={}), profile.model_dump(mode="json"))
    return tomlkit.dumps(document)


def _update(table: Any, canonical: Any, current: dict[str, Any]) -> None:
    """Make `table` (the user's) say what `canonical` says, in place. A key the canonical form leaves
    out stays when it holds the current value (the user wrote a default on purpose) and goes otherwise."""
    for key in list(table.keys()):
        if key in canonical:
            continue
        old, now = _plain(table[key]), current.get(key)
        if isinstance(old, dict) and isinstance(now, dict):
            _update(table[key], {}, now)
            if not table[key]:
                del table[key]
        elif old != now:
            del table[key]
    for key, item in canonical.items():
        old = _plain(table[key]) if key in table else None
        if isinstance(old, dict) and isinstance(item, dict):
            _update(table[key], item, current.get(key) or {})
        elif key not in table or old != _plain(item):
            table[key] = item


def _plain(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


# ---------------------------------------------------------------- error helpers


def _problems_from_validation(err: ValidationError, text: str, source: str) -> list[ProfileProblem]:
    problems = []
    for item in err.errors():
        loc = [str(part) for part in item["loc"] if not isinstance(part, int)]
        # pydantic reports the member of a union it tried; drop those type tags
        loc = [part for part in loc if not part.startswith(("list[", "function-", "literal["))]
        problems.append(
            ProfileProblem(
                file=source,
                key=".".join(loc),
                line=find_key_line(text, loc),
                message=_describe(item),
            )
        )
    return problems


def _describe(item: dict[str, Any]) -> str:
    kind = item["type"]
    value = item.get("input")
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling (`workbench schema` lists every key)"
    if kind == "literal_error":
        expected = item.get("ctx", {}).get("expected", "")
        return f"{value!r} is not allowed; use one of {expected}"
    if kind == "missing":
        return "required key is missing"
    return f"{value!r}: {item['msg']}"


def find_key_line(text: str, loc: list[str]) -> int | None:
    """Best-effort line number of a dotted key inside TOML text (1-based)."""
    if not loc:
        return None
    *tables, key = loc
    lines = text.splitlines()
    start = 0
    if tables:
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, tables)) + r"\s*\]\s*(#.*)?$")
        found = next((i for i, line in enumerate(lines) if header.match(line)), None)
        if found is None:
            return None
        start = found + 1
    for i in range(start, len(lines)):
        if re.match(r"^\s*\[", lines[i]):
            break
        if re.match(r"^\s*" + re.escape(key) + r"\s*=", lines[i]):
            return i + 1
    return start if tables else None


def schema_rows(model: type[BaseModel] = LaunchProfile, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, help) for every leaf key of the profile."""
    rows = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += schema_rows(annotation, f"{prefix}{name}.")
            continue
        default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
        rows.append((prefix + name, _type_name(annotation), repr(default), info.description or ""))
    return rows


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + "|".join(str(arg) for arg in get_args(annotation))
    return str(annotation).replace("typing.", "") if get_args(annotation) else annotation.__name__


def field_help(section: str, name: str) -> str:
    """One-line help text of a profile field, for the TUI and `show --schema`."""
    model: type[BaseModel] = LaunchProfile
    for part in section.split(".") if section else []:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    info = model.model_fields[name]
    return info.description or ""
