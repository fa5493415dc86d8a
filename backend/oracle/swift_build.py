"""Question `swift_build`: swift builds its own argument object for a launch's argv (child side).

`{"command": "sft", "argv": [...]}` -> `{"swift_version", "seconds", "built": bool, "problems": [...]}`.
The argv is the one the launch passes after `-m swift.cli.<command>`; the value of `--output_dir` is
replaced by a scratch folder (swift's `__post_init__` creates it), removed afterwards. swift's own
`parse_args` path runs: `HfArgumentParser.parse_args_into_dataclasses`, so every check of the
dataclass's `__post_init__` runs (model_type and template matching from config.json, the libraries
behind flags, conflicting options). No weights are loaded: swift reads the model's config only.

Each problem is `{"kind", "flag", "message", "choices", "suggested", "package"}`:
- `model_type` / `template`: swift cannot choose among `choices`; `suggested` is the one the model's own
  files name (config.json's model_type, the matched model type's template), else swift's first
  candidate (`why` says which), and the build is tried again with it so the problems behind it are
  found in the same answer;
- `library`: a flag needs a package that is not installed (`package`: what to pip install);
- `refused`: anything else swift raised, in its own words (`flag`: the argv flag it names, if any).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

CLASSES = {"sft": "SftArguments", "pt": "PretrainArguments", "rlhf": "RLHFArguments"}
SCRATCH = "<scratch>"  # the parent's placeholder for --output_dir: the cache key holds no run folder
MAX_TRIES = 4  # model_type, then template, then what stands behind them
_CHOICES = re.compile(r"Multiple possible types found: (\[[^\]]*\])")
_PIP = re.compile(r"pip install ([A-Za-z0-9_.\-\[\]]+)")
_DISTRIBUTION = re.compile(r"The '([A-Za-z0-9_.\-]+)' distribution was not found")
# flags whose value needs a package swift imports only once the model loads: (flag, values, module, package)
NEEDS = (
    ("attn_impl", ("flash_attn", "flash_attention_2", "flash_attention_3"), "flash_attn", "flash-attn"),
    ("quant_method", ("bnb",), "bitsandbytes", "bitsandbytes"),
    ("quant_method", ("awq",), "awq", "autoawq"),
    ("quant_method", ("gptq",), "gptqmodel", "gptqmodel"),
    ("quant_method", ("hqq",), "hqq", "hqq"),
    ("quant_method", ("eetq",), "eetq", "eetq"),
    ("use_liger_kernel", (True,), "liger_kernel", "liger-kernel"),
    ("tuner_type", ("lora", "longlora", "adalora", "vera", "boft", "fourierft"), "peft", "peft"),
    ("tuner_type", ("unsloth",), "unsloth", "unsloth"),
    ("tuner_type", ("llamapro", "adapter", "lisa", "reft", "bone"), "peft", "peft"),
    ("deepspeed", None, "deepspeed", "deepspeed"),
)


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()
    progress("importing ms-swift's argument classes")
    import swift
    import swift.arguments as arguments

    from backend.oracle.swift_args import build_parser

    command = payload.get("command", "sft")
    parser = build_parser(getattr(arguments, CLASSES[command]))
    argv = [str(word) for word in payload.get("argv", [])]
    problems: list[dict[str, Any]] = []
    built = False
    progress(f"asking swift {command} to build the run's arguments (no weights loaded)")
    for _ in range(MAX_TRIES):
        args, problem = _build(parser, argv)
        if problem is None:
            built = True
            problems += _missing_libraries(args)
            break
        problems.append(problem)
        if problem["kind"] not in ("model_type", "template") or not problem["suggested"]:
            break
        argv = [*argv, f"--{problem['flag']}", problem["suggested"]]
    return {"swift_version": getattr(swift, "__version__", "unknown"), "built": built, "problems": problems,
            "seconds": round(time.perf_counter() - started, 2)}


def _build(parser: Any, argv: list[str]) -> tuple[Any, dict[str, Any] | None]:
    """swift's argument object for `argv` (output in a scratch folder, removed), or the problem it raised."""
    scratch = tempfile.mkdtemp(prefix="workbench-swift-build-")
    words = [scratch if word == SCRATCH else word for word in argv]
    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages):
            args, _ = parser.parse_args_into_dataclasses(words, return_remaining_strings=True)
        return args, None
    except SystemExit:  # argparse refused a value: its last line says which
        text = (messages.getvalue().strip().splitlines() or ["swift's parser refused the arguments"])[-1]
        return None, _problem("refused", text, argv)
    except Exception as err:
        return None, _classify(err, argv)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _classify(err: BaseException, argv: list[str]) -> dict[str, Any]:
    text = " ".join(str(err).split()) or type(err).__name__
    if "Failed to automatically match `model_type`" in text:
        choices = _choices(text)
        named = _config_model_type(argv, choices)
        return _problem("model_type", text, argv, flag="model_type", choices=choices,
                        suggested=named or next(iter(choices), None),
                        why="config.json's model_type" if named else "swift's first candidate")
    if "Failed to automatically match `template_type`" in text:
        choices = _choices(text)
        named = _model_type_template(argv, choices)
        return _problem("template", text, argv, flag="template", choices=choices,
                        suggested=named or next(iter(choices), None),
                        why="the model type's template" if named else "swift's first candidate")
    package = _package(text)
    if package:
        return _problem("library", text, argv, package=package)
    return _problem("refused", f"{type(err).__name__}: {text}", argv)


def _problem(kind: str, message: str, argv: list[str], *, flag: str | None = None, choices: list[str] | None = None,
             suggested: str | None = None, why: str = "", package: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "flag": flag or _named_flag(message, argv), "message": message, "choices": choices or [],
            "suggested": suggested, "why": why, "package": package}


def _named_flag(message: str, argv: list[str]) -> str | None:
    """The first flag of `argv` the message names as a word (`use_liger_kernel requires ...`)."""
    names = [word[2:].partition("=")[0] for word in argv if word.startswith("--")]
    return next((name for name in names if re.search(rf"(?<!\w){re.escape(name)}(?![\w-])", message)), None)


def _package(text: str) -> str | None:
    found = _PIP.search(text) or _DISTRIBUTION.search(text)
    if found:
        return found.group(1).strip("`'\".")
    if "No module named" in text:
        module = re.search(r"No module named '([^']+)'", text)
        return module.group(1).split(".")[0].replace("_", "-") if module else None
    return None


def _choices(text: str) -> list[str]:
    import ast

    found = _CHOICES.search(text)
    try:
        return [str(c) for c in ast.literal_eval(found.group(1))] if found else []
    except (ValueError, SyntaxError):
        return []


def _flag_value(argv: list[str], name: str) -> str | None:
    for number, word in enumerate(argv):
        if word == f"--{name}" and number + 1 < len(argv):
            return argv[number + 1]
        if word.startswith(f"--{name}="):
            return word.partition("=")[2]
    return None


def _config_model_type(argv: list[str], choices: list[str]) -> str | None:
    """The model's own config.json `model_type` when swift lists it among its choices."""
    import json
    from pathlib import Path

    model = _flag_value(argv, "model")
    try:
        named = json.loads((Path(model or "") / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return named if named in choices else None


def _model_type_template(argv: list[str], choices: list[str]) -> str | None:
    """The template swift's registry gives the model type (given or suggested) when it is a choice."""
    from swift.model.register import MODEL_MAPPING

    given = [word for number, word in enumerate(argv) if number and argv[number - 1] == "--model_type"]
    meta = MODEL_MAPPING.get(given[-1] if given else _flag_value(argv, "model_type") or "")
    template = getattr(meta, "template", None)
    return template if template in choices else None


def _missing_libraries(args: Any) -> list[dict[str, Any]]:
    """Packages the built arguments need that are not installed (swift imports them only at model load)."""
    found: list[dict[str, Any]] = []
    for flag, values, module, package in NEEDS:
        value = getattr(args, flag, None)
        if value in (None, False, "") or (values is not None and value not in values):
            continue
        if importlib.util.find_spec(module) is None:
            found.append({"kind": "library", "flag": flag, "message": f"--{flag} {value} needs the Python package "
                          f"{package!r} ({module}), which is not installed", "choices": [], "suggested": None,
                          "why": "", "package": package})
    return found
