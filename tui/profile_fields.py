"""Launch-profile fields as the form edits them, from the pydantic schema of `LaunchProfile` (no Textual).

`field_spec` says how a field is edited (kind, help, choices), `section_paths` lists a section's fields
in schema order, `parse_text` / `format_value` turn typed text into values and back, and
`get_value` / `set_value` read and assign a field by its dotted path (pydantic validates).
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from backend.profile import LaunchProfile

Kind = Literal["bool", "choice", "text", "number", "list", "int_list", "mapping", "multiline"]
NONE_CHOICE = "(none)"


@dataclass(frozen=True)
class FieldSpec:
    """How one profile field is edited."""

    path: str  # dotted, e.g. "distribution.fsdp.cpu_offload"
    kind: Kind
    help: str
    choices: tuple[tuple[str, Any], ...] = ()
    optional: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def dom_id(self) -> str:
        return "field-" + self.path.replace(".", "__")


def section_model(section: str) -> type[BaseModel]:
    model: type[BaseModel] = LaunchProfile
    for part in section.split(".") if section else []:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    return model


def field_spec(path: str) -> FieldSpec:
    section, _, name = path.rpartition(".")
    info = section_model(section).model_fields[name]
    annotation = info.annotation
    help_text = info.description or ""
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = next((a for a in args if a is not type(None)), annotation) if optional else annotation
    origin = typing.get_origin(inner)
    if path == "description":
        return FieldSpec(path, "multiline", help_text)
    if inner is bool:
        if optional:
            choices: tuple[tuple[str, Any], ...] = (("auto", None), ("true", True), ("false", False))
            return FieldSpec(path, "choice", help_text, choices, optional=True)
        return FieldSpec(path, "bool", help_text)
    if origin is Literal:
        choices = tuple((str(v), v) for v in typing.get_args(inner))
        if optional:
            choices = ((NONE_CHOICE, None), *choices)
        return FieldSpec(path, "choice", help_text, choices, optional)
    if origin is list:
        item = typing.get_args(inner)[0]
        return FieldSpec(path, "int_list" if item is int else "list", help_text)
    if origin is dict:
        return FieldSpec(path, "mapping", help_text)
    if inner in (int, float):
        return FieldSpec(path, "number", help_text, optional=optional)
    return FieldSpec(path, "text", help_text, optional=optional)


def section_paths(section: str) -> Iterator[str | tuple[str, str]]:
    """Field paths of a section in schema order; nested sections yield (heading, path) first."""
    model = section_model(section)
    prefix = f"{section}." if section else ""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield ("heading", prefix + name)
            yield from section_paths(prefix + name)
        else:
            yield prefix + name


def get_value(profile: LaunchProfile, path: str) -> Any:
    target: Any = profile
    for part in path.split("."):
        target = getattr(target, part)
    return target


def set_value(profile: LaunchProfile, path: str, value: Any) -> None:
    """Assign through pydantic (validate_assignment): raises ValidationError when refused."""
    section, _, name = path.rpartition(".")
    target = get_value(profile, section) if section else profile
    setattr(target, name, value)


def format_value(spec: FieldSpec, value: Any) -> str:
    if value is None:
        return ""
    if spec.kind == "list":
        return shlex.join(value)
    if spec.kind == "int_list":
        return ",".join(str(v) for v in value)
    if spec.kind == "mapping":  # extra_swift_args (#11): values kept as typed
        from backend.launch.swift_schema import format_extra_text

        return format_extra_text(value)
    if spec.kind == "number" and isinstance(value, float):
        return repr(value)
    return str(value)


def parse_text(spec: FieldSpec, text: str) -> Any:
    """Typed text -> the value to assign; ValueError says what is wrong and how to write it."""
    stripped = text.strip()
    if spec.kind in ("text", "number") and spec.optional and not stripped:
        return None
    if spec.kind == "number":
        if not stripped:
            raise ValueError("a number is needed")
        return stripped  # pydantic converts and range-checks
    if spec.kind == "list":
        try:
            return shlex.split(stripped)
        except ValueError as err:
            raise ValueError(f"{err}; separate entries with spaces, quote ones that hold spaces") from None
    if spec.kind == "int_list":
        parts = [p for p in stripped.replace(",", " ").split() if p]
        if not all(p.isdigit() for p in parts):
            raise ValueError("whole numbers separated by commas, e.g. 0,1")
        return [int(p) for p in parts]
    if spec.kind == "mapping":
        return _parse_mapping(stripped, env=spec.path == "env")
    return text


def _parse_mapping(text: str, env: bool = False) -> dict[str, Any]:
    """extra_swift_args (#11): one parser, swift's schema types the values; no comma splitting.
    env: NAME=value words, every value a string (a secret's name with an empty value)."""
    from backend.launch.swift_schema import load_schema, parse_extra_text

    if env:
        return {k: str(v) if not isinstance(v, bool) else ("true" if v else "false")
                for k, v in parse_extra_text(text, None).items()}
    return parse_extra_text(text, load_schema(allow_ask=False))


TABS: list[tuple[str, str, list[str]]] = [
    ("model", "Model", ["model"]),
    ("data", "Data", ["data"]),
    ("tuner", "Tuner", ["tuner"]),
    ("precision", "Precision", ["precision"]),
    ("distribution", "Distribution", ["distribution"]),
    ("training", "Training", ["training", "eval"]),
    ("output", "Output", ["", "output", "run", "queue", "watch", "notify", "debug"]),
]


def visible_rules(p: LaunchProfile) -> dict[str, bool]:
    """Fields that only matter for some settings (prefix -> shown)."""
    t, d = p.tuner, p.distribution
    return {
        "tuner.lora_": t.type != "full",
        "tuner.target_modules": t.type != "full",
        "tuner.quant_": t.type == "qlora",
        "tuner.bnb_4bit_": t.type == "qlora" and t.quant_bits == 4,
        "precision.loss_scale_": bool(p.precision.fp16),
        "distribution.fsdp": d.strategy == "fsdp",
        "distribution.deepspeed": d.strategy == "deepspeed",
        "distribution.deepspeed.offload_param": d.strategy == "deepspeed" and d.deepspeed.stage == 3,
        "distribution.fsdp.min_num_params": d.strategy == "fsdp" and d.fsdp.auto_wrap_policy == "SIZE_BASED_WRAP",
        "distribution.fsdp.transformer_layer_cls_to_wrap":
            d.strategy == "fsdp" and d.fsdp.auto_wrap_policy == "TRANSFORMER_BASED_WRAP",
        "distribution.main_process_": d.num_machines > 1,
        "distribution.machine_rank": d.num_machines > 1,
        "distribution.rdzv_backend": d.num_machines > 1,
        "training.gradient_checkpointing_use_reentrant": p.training.gradient_checkpointing,
    }


def is_visible(path: str, profile: LaunchProfile, rules: dict[str, bool] | None = None) -> bool:
    """The most specific matching rule decides."""
    matching = [(prefix, shown) for prefix, shown in (rules or visible_rules(profile)).items()
                if path.startswith(prefix)]
    return max(matching, key=lambda r: len(r[0]))[1] if matching else True


def tab_paths(sections: list[str]) -> Iterator[str | tuple[str, str]]:
    for section in sections:
        if section:
            yield from section_paths(section)
        else:  # the profile's own scalar fields, not its sections
            yield from (p for p in section_paths("") if isinstance(p, str) and "." not in p)
