"""Rules on what the profile points at and holds: paths and datasets that exist and can be read safely,
[env], the DeepSpeed config, values swift would read as flags, target modules the model has, hostile values."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from backend.core.paths import BUILTIN_DATASETS, BUILTIN_PREFIX, is_builtin, looks_local
from backend.core.safe_text import masked
from backend.hardware.machine import HardwareInfo
from backend.launch.validate.core import Problem, rule
from backend.models.refs import RUN_PREFIX
from backend.models.resolved import ResolvedProfile
from backend.profile import LaunchProfile

# ---------------------------------------------------------------- files


def paths_exist(profile: LaunchProfile, resolved: ResolvedProfile) -> Iterator[Problem]:
    source = profile.model.source
    if is_builtin(source):
        from backend.models.demo.build import BUILTIN_MODELS

        if source.removeprefix(BUILTIN_PREFIX) not in BUILTIN_MODELS:
            yield Problem("model.source", "error", f"unknown built-in model {source!r}.",
                          f"Use one of: {', '.join('builtin:' + n for n in BUILTIN_MODELS)}.")
    elif source.startswith(RUN_PREFIX):
        if resolved.model.problem:
            yield Problem("model.source", "error", resolved.model.problem,
                          "Merge the run's LoRA first (`workbench merge RUN`), or pick another model.")
    elif looks_local(source) and resolved.model.path is None:  # a local reference holds a folder or nothing
        yield Problem("model.source", "error", f"model folder {source!r} does not exist.",
                      "Give an existing folder holding config.json, or a hub id.")
    for found in resolved.datasets():
        ref, path_part = found.ref, found.ref.partition("#")[0]
        if is_builtin(ref):
            if ref.removeprefix(BUILTIN_PREFIX) not in BUILTIN_DATASETS:
                yield Problem(found.field, "error", f"unknown built-in dataset {ref!r}.",
                              f"Use one of: {', '.join('builtin:' + n for n in BUILTIN_DATASETS)}.")
        elif looks_local(path_part) and found.local is not None and not found.local.exists() and \
                not os.path.islink(found.local):  # swift reads folders too; a loop: below
            yield Problem(found.field, "error", f"dataset file {path_part!r} does not exist.",
                          "Give an existing .jsonl/.json/.csv/.txt file or dataset folder, or a hub id.")


def dataset_files(resolved: ResolvedProfile, *, read: bool) -> Iterator[Problem]:
    """Local datasets that must not be opened (a FIFO, a symlink loop) and, with `read` (before swift is
    asked to read them), files with a line too long or a row nested too deep: #29."""
    from backend.data.files import file_problem, hostile_dataset

    for found in resolved.datasets():
        if found.local is None:
            continue
        problem = hostile_dataset([str(found.local)]) if read else file_problem(found.local)
        if problem:
            yield Problem(found.field, "error", f"{problem}.",
                          "Give a regular .jsonl/.json/.csv/.txt file with one row a line (rows nest at most "
                          "100 levels, lines stay under 32 MiB).")


@rule
def _env_section(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """[env]: names a profile key decides are refused; secrets must be in the environment at launch."""
    import os

    from backend.launch.command import RESERVED_ENV
    from backend.launch.swift_schema import is_secret_name

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
    from backend.launch.command import deepspeed_reference
    from backend.launch.swift_schema import load_schema

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
    from backend.launch.command import flag_like_values

    for found in flag_like_values(profile, hardware):
        key = found.flag.key or found.flag.name
        fix = FLAG_LIKE_FIX.get(key.replace("data.val", "data.train"), "Remove the leading '-'; a swift flag goes "
                                "in its own profile key or in extra_swift_args.")
        yield Problem(key, "error", f"{masked(found.value, key)!r} begins with '-': swift's parser would read it "
                      "as a flag of "
                      f"its own, not as a value of --{found.flag.name}.", fix)


# ---------------------------------------------------------------- names only the libraries know (#29)


def names_libraries_know(profile: LaunchProfile, resolved: ResolvedProfile, *, ask: bool) -> Iterator[Problem]:
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
        yield from _target_modules(profile, resolved, names.target_keywords)


def _target_modules(profile: LaunchProfile, resolved: ResolvedProfile,
                    keywords: tuple[str, ...]) -> Iterator[Problem]:
    import difflib

    asked = [t for t in profile.tuner.target_modules if t not in keywords and not t.startswith("-")]
    paths = _module_paths(resolved) if asked else None
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


def _module_paths(resolved: ResolvedProfile) -> list[str] | None:
    """The paths of the model's weight-holding modules (indices as '*'), from the cached shape answer only."""
    from backend.models.shape_exact import cached_answer
    from backend.models.shape_formula import ConfigError, read_config

    try:
        config, _ = read_config(resolved.config_dir())
        answer = cached_answer(config) or {}
    except (LookupError, ConfigError, OSError, ValueError, RecursionError):  # no config.json: other rules say why
        return None
    paths = answer.get("module_paths")
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) and answer.get("known") else None


def _names_a_module(target: str, paths: list[str]) -> bool:
    """PEFT's rule for a list entry: the module's path is the entry or ends with '.' + the entry."""
    pattern = re.sub(r"(?<![^.])\d+(?=\.|$)", "*", target)
    return any(path == pattern or path.endswith("." + pattern) for path in paths)


MAX_NAME_CHARS = 100
SEED_LIMIT = 2**32  # numpy's and swift's seeds are 32-bit
MAX_LEARNING_RATE = 1.0  # above it no optimizer setting trains (the quickstart's 3e-3 is already high)


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
    rate = profile.training.learning_rate
    if rate is not None and not 0 < rate <= MAX_LEARNING_RATE:
        yield Problem("training.learning_rate", "error", f"learning_rate {rate:g} is outside any sane range "
                      f"(0 < learning_rate <= {MAX_LEARNING_RATE:g}): the loss would diverge from the first step.",
                      "Give a rate like 1e-4 for LoRA or 1e-5 for full fine-tuning (swift's defaults), or remove the "
                      "key for swift's default.")
    for key in ("train", "val"):
        for ref in getattr(profile.data, key):
            path_part = ref.partition("#")[0]
            if not ref.startswith("-") and not looks_local(path_part) and any(c.isspace() for c in ref) and \
                    not path_part.endswith((".jsonl", ".json", ".csv", ".txt", ".parquet")):
                yield Problem(f"data.{key}", "error", f"dataset {ref!r} is neither an existing file nor a hub id "
                              "(a hub id has no spaces).", "Give the path of a .jsonl/.json/.csv file or a hub id.")
