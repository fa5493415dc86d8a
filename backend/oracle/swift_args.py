"""Question: the argument schema of the installed ms-swift, read from its own parser (child side).

For each command (sft, pt, export, infer) the answer lists every flag swift's `HfArgumentParser`
knows: name, type, default, choices, help, whether it takes several values (`nargs`), its aliases
(`--no_X` complements of true-by-default booleans) and whether it is required. The parser is built
exactly as `swift.utils.utils.parse_args` builds it, so what is listed is what `swift sft` accepts.

Parent side: `backend.launch.swift_schema` asks this question and caches the answer by swift's version.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import re
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

COMMANDS = {
    "sft": "SftArguments",
    "pt": "PretrainArguments",
    "export": "ExportArguments",
    "infer": "InferArguments",
}


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("importing ms-swift's argument classes")
    import swift
    import swift.arguments as arguments

    commands = payload.get("commands") or list(COMMANDS)
    result: dict[str, Any] = {"swift_version": getattr(swift, "__version__", "unknown"), "commands": {}}
    for command in commands:
        progress(f"reading swift {command}'s parser")
        cls = getattr(arguments, COMMANDS[command])
        parser = build_parser(cls)
        types = _field_types(cls)
        docs = docstring_help(cls)
        result["commands"][command] = {
            "class": COMMANDS[command],
            "allow_abbrev": bool(getattr(parser, "allow_abbrev", True)),
            "fields": [_describe(action, types, docs) for action in _field_actions(parser)],
        }
    result["deepspeed_presets"] = deepspeed_presets()
    progress("reading the defaults swift decides by tuner type")
    result["tuner_defaults"] = tuner_defaults(arguments.SftArguments)
    result["precision_by_dtype"] = precision_by_dtype(arguments.SftArguments)
    return result


def precision_by_dtype(cls: type) -> dict[str, str]:
    """What swift trains in when neither --bf16 nor --fp16 is given, per model dtype:
    {"float32": "fp16", "bfloat16": "bf16", ...} (4.6: fp16 for fp16/fp32 models, bf16 for bf16).

    swift's own `_init_mixed_precision` runs on a stand-in; on this machine's device (it answers
    "fp32" where swift turns both off, as on Apple's MPS). {} when it needs more than the stand-in."""
    import torch

    method = getattr(cls, "_init_mixed_precision", None)
    if method is None:
        return {}
    found = {}
    for name in ("float32", "float16", "bfloat16"):
        stand_in = types.SimpleNamespace(torch_dtype=getattr(torch, name), fp16=None, bf16=None)
        try:
            method(stand_in)
        except Exception:
            return {}
        found[name] = "bf16" if stand_in.bf16 else "fp16" if stand_in.fp16 else "fp32"
    return found


def tuner_defaults(cls: type) -> dict[str, dict[str, Any]]:
    """Defaults swift decides in `__post_init__` from the tuner type (4.6: learning_rate, 1e-5 for
    full and 1e-4 for the adapters), as field -> {tuner_type: value}.

    Found by running swift's own `_init_override` on a stand-in holding every field's declared
    default, with the `_init_*` steps it calls (output dir, metric, eval strategy: they touch the
    disk) replaced by no-ops, then keeping the fields it changed. When swift's code needs more than
    the stand-in has, the answer is {} and the form says nothing rather than guess.
    """
    method = getattr(cls, "_init_override", None)
    tuner = next((f for f in dataclasses.fields(cls) if f.name == "tuner_type"), None)
    if method is None or tuner is None:
        return {}
    declared = {f.name: _declared_default(f) for f in dataclasses.fields(cls)}
    declared = {name: value for name, value in declared.items() if value is not dataclasses.MISSING}
    steps = set(re.findall(r"self\.(_init_\w+)\(", _source(method)))
    found: dict[str, dict[str, Any]] = {}
    for tuner_type in _tuner_choices(cls):
        stand_in = types.SimpleNamespace(**declared)
        stand_in.tuner_type = tuner_type
        for step in steps:
            setattr(stand_in, step, lambda *args, **kwargs: None)
        try:
            method(stand_in)
        except Exception:  # swift reads something the stand-in lacks: no answer, not a guess
            return {}
        for name, value in vars(stand_in).items():
            if name in declared and name != "tuner_type" and value != declared[name]:
                found.setdefault(name, {})[tuner_type] = _jsonable(value)
    return found


def _declared_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _source(function: Any) -> str:
    import inspect

    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _tuner_choices(cls: type) -> list[str]:
    """The tuner types swift supports (its `get_supported_tuners`, which its `tuner_type` help lists)."""
    try:
        from swift.arguments.base_args.base_args import get_supported_tuners
    except ImportError:
        return ["full", "lora"]  # where swift moved it: at least the two the workbench emits
    return sorted(str(name) for name in get_supported_tuners())


@contextlib.contextmanager
def _swift_type_hint_patch() -> Iterator[None]:
    """swift's own fix for `str | dict` fields (private in 4.6: fall back when it moves)."""
    try:
        from swift.utils.utils import _patch_get_type_hints
    except ImportError:
        yield
        return
    with _patch_get_type_hints():
        yield


def build_parser(cls: type) -> argparse.ArgumentParser:
    from transformers import HfArgumentParser
    from transformers.hf_argparser import DataClassType

    with _swift_type_hint_patch():
        return HfArgumentParser([DataClassType(cls)])


def _field_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """One action per dataclass field; the `--no_X` complements become aliases of field X."""
    actions = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    main = {a.dest: a for a in actions if not isinstance(a, argparse._StoreFalseAction)}
    aliases: dict[str, list[str]] = {}
    for action in actions:
        if isinstance(action, argparse._StoreFalseAction) and action.dest in main:
            aliases.setdefault(action.dest, []).extend(action.option_strings)
    for dest, action in main.items():
        action.workbench_negations = aliases.get(dest, [])  # type: ignore[attr-defined]
    return list(main.values())


def _field_types(cls: type) -> dict[str, str]:
    hints = {}
    for f in dataclasses.fields(cls):
        hints[f.name] = str(f.type).replace("typing.", "")
    return hints


def docstring_help(cls: type) -> dict[str, str]:
    """swift documents its fields in the classes' docstrings ("name (type): text ..."): field -> text."""
    docs: dict[str, str] = {}
    entry = re.compile(r"^(\s*)(\w+) \(([^)]*)\):\s*(.*)$")
    for klass in reversed(cls.__mro__):
        current, indent = None, 0
        for line in (klass.__doc__ or "").splitlines():
            found = entry.match(line)
            if found:
                current, indent = found.group(2), len(found.group(1))
                docs[current] = found.group(4).strip()
            elif current and line.strip() and len(line) - len(line.lstrip()) > indent:
                docs[current] += " " + line.strip()
            else:
                current = None
    return docs


def deepspeed_presets() -> list[str]:
    """The DeepSpeed presets swift ships (`--deepspeed zero2` ...), from its own config folder."""
    spec = importlib.util.find_spec("swift")
    folders = [Path(p) / "config" for p in (spec.submodule_search_locations or [])] if spec else []
    return sorted(p.stem for folder in folders for p in folder.glob("zero*.json"))


def _describe(action: argparse.Action, types: dict[str, str], docs: dict[str, str]) -> dict[str, Any]:
    declared = types.get(action.dest, "")
    is_list = action.nargs in ("+", "*")
    return {
        "name": action.dest,
        "flags": list(action.option_strings),
        "negations": list(getattr(action, "workbench_negations", [])),
        "type": _kind(action, declared),
        "declared": declared,
        "default": _jsonable(action.default),
        "choices": [_jsonable(c) for c in action.choices] if action.choices else None,
        "is_list": is_list,
        "nargs": action.nargs if isinstance(action.nargs, (str, type(None))) else int(action.nargs),
        "required": bool(action.required),
        "help": (action.help or "").strip() or docs.get(action.dest, ""),
        "optional_value": action.nargs == "?",
    }


def _kind(action: argparse.Action, declared: str) -> str:
    """bool | int | float | str | dict (JSON text) | other: how a value given as text is read."""
    conv = action.type
    name = getattr(conv, "__name__", "") if conv is not None else "str"
    if name == "string_to_bool":
        return "bool"
    if conv in (int, float, str):
        return conv.__name__
    if conv is None:
        return "str"
    if "dict" in declared.lower() or "json" in name.lower():
        return "dict"
    return name or "other"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if dataclasses.is_dataclass(value):
        return repr(value)
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if hasattr(value, "value"):  # enums (transformers' IntervalStrategy ...)
            return _jsonable(value.value)
        return str(value)

