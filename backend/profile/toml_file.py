"""A profile as a TOML file: read with every problem named by file, key and line; saved atomically.

Only the values that differ from the defaults are written, so a profile shows what is special
about it; a save over an existing file keeps the user's comments and key order (tomlkit).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
import tomlkit.items
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from backend.core.fs import write_text_atomic
from backend.core.safe_text import masked
from backend.profile.model import LaunchProfile

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


def profile_to_toml(profile: LaunchProfile, *, keep_set: bool = False) -> str:
    """Canonical TOML: only non-default values, sections in schema order. `keep_set`: also every key the
    profile was given, default or not (an imported script pinned `--lora_rank 8` on purpose: a later swift
    may change its default)."""
    return tomlkit.dumps(_canonical_document(profile, always=given_keys(profile) if keep_set else None))


def given_keys(profile: LaunchProfile) -> dict[str, tuple[str, ...]]:
    """ALWAYS_WRITTEN and, per section, the keys the profile was built with (pydantic's `model_fields_set`)."""
    keys = {section: tuple(names) for section, names in ALWAYS_WRITTEN.items()}
    for section in type(profile).model_fields:
        value = getattr(profile, section)
        if isinstance(value, BaseModel):
            known = keys.get(section, ())
            keys[section] = known + tuple(n for n in type(value).model_fields if n in value.model_fields_set
                                          and n not in known)
    # the canonical writer puts each of these keys first, one after the other: reversed, they read in order
    return {section: tuple(reversed(names)) for section, names in keys.items() if names}


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


def save_profile(profile: LaunchProfile, path: str | Path, *, layout: str | Path | None = None,
                 keep_set: bool = False) -> Path:
    """Write atomically: readers see the old file or the new one, never half of one.

    `layout`: the user's file whose comments, key order and formatting the save keeps (the TUI
    passes the file the profile came from): only the values that changed are rewritten, new ones
    added, those set back to their default dropped. None, or a file that cannot be read as TOML:
    the canonical form (`keep_set`: with every key the profile was given, see profile_to_toml)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = _layout_text(Path(layout)) if layout is not None else None
    text = profile_to_toml(profile, keep_set=True) if keep_set and not existing else profile_text_over(profile, existing)
    write_text_atomic(path, text)
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


def _describe(item: ErrorDetails) -> str:
    kind = item["type"]
    value = _shown_input(item)
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling (`workbench schema` lists every key)"
    if kind == "literal_error":
        expected = item.get("ctx", {}).get("expected", "")
        return f"{value!r} is not allowed; use one of {expected}"
    if kind == "missing":
        return "required key is missing"
    return f"{value!r}: {item['msg']}"


def _shown_input(item: ErrorDetails) -> Any:
    """The value pydantic refused, a secret in it masked (a token never reaches an error message)."""
    value = item.get("input")
    key = str(item["loc"][-1]) if item["loc"] else ""
    if isinstance(value, str):
        return masked(value, key)
    return "***" if masked("", key) == "***" else value


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
