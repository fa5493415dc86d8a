"""The profile's schema as a table: every leaf key with its type, default and help (`workbench schema`, the TUI)."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from backend.profile.model import LaunchProfile


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
