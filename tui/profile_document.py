"""The profile being edited, as a document: its file, its unsaved changes, save / save as / diff / open.

No Textual here: the launch screen owns one `ProfileDocument` and shows what it says. Values are set
through `set`, which validates with pydantic and remembers refused values (a refused value keeps the
form "modified" and blocks saving). Save as rebases the relative local paths of the profile onto the
new folder only once the save has been accepted: a refused save changes nothing.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backend.core.paths import BUILTIN_SWIFT_TYPES, SHIPPED_PROFILES_DIR, is_builtin, looks_local
from backend.profile import LaunchProfile, ProfileError, load_profile, profile_to_toml, save_profile
from tui.command_text import display_path
from tui.profile_fields import get_value, is_visible, set_value

REBASED_FIELDS = ("model.source", "data.train", "data.val", "output.output_dir")


class SaveRefused(Exception):
    """The document was not saved; the message says why and what to do."""


@dataclass
class ProfileDocument:
    """A `LaunchProfile`, the file it came from (None: not saved yet) and what that file holds."""

    profile: LaunchProfile = field(default_factory=LaunchProfile)
    path: Path | None = None
    saved_text: str = ""
    refused: dict[str, str] = field(default_factory=dict)
    """Fields whose typed value was refused -> why (the profile keeps the last accepted value)."""
    open_problem: str | None = None
    """Why the file asked for could not be opened (the form then shows a blank profile)."""
    revision: int = 0
    """Counts every change, so that what shows the document knows when to look again."""
    generation: int = 0
    """Counts the profiles opened in this document (a new one resets every field's state)."""
    quant_method_chosen_for_qlora: bool = False
    """quant_method was set by choosing QLoRA in the form (and goes again when the choice does)."""

    @classmethod
    def open(cls, path: Path | None) -> ProfileDocument:
        """The profile at `path`; a new one named after it when the file does not exist yet."""
        if path is None:
            profile = LaunchProfile()
            return cls(profile, None, profile_to_toml(profile))
        path = Path(path)
        if not path.exists():  # a new profile that saving will create at that path
            profile = LaunchProfile(name=path.stem or "untitled")
            return cls(profile, path.resolve(), profile_to_toml(profile))
        try:
            profile = load_profile(path)
        except ProfileError as err:  # the broken file is left alone: saving asks for a name
            blank = LaunchProfile()
            return cls(blank, None, profile_to_toml(blank), open_problem=str(err))
        return cls(profile, path.resolve(), profile_to_toml(profile))

    # ------------------------------------------------------------ what it is

    @property
    def base_dir(self) -> Path:
        """Relative paths in the profile are relative to its file's folder."""
        return self.path.parent if self.path else Path.cwd()

    @property
    def read_only(self) -> bool:
        """Shipped profiles are examples: saving one asks for a new name."""
        return self.path is not None and self.path.is_relative_to(SHIPPED_PROFILES_DIR.resolve())

    @property
    def is_dirty(self) -> bool:
        return profile_to_toml(self.profile) != self.saved_text or bool(self.refused)

    @property
    def label(self) -> str:
        """Where the profile lives, for the status line."""
        return profile_label(self.path) if self.path else "not saved yet"

    # ------------------------------------------------------------ changing it

    def set(self, path: str, value: Any) -> str | None:
        """Assign a field (pydantic validates); the reason when refused, None when accepted."""
        try:
            set_value(self.profile, path, value)
        except ValidationError as err:
            self.refused[path] = first_message(err)
        else:
            self.refused.pop(path, None)
            if path == "tuner.type":
                self._follow_qlora_choice(value)
            elif path == "tuner.quant_method":
                self.quant_method_chosen_for_qlora = False  # the user's own choice stays
            for hidden in [p for p in self.refused if not is_visible(p, self.profile)]:
                del self.refused[hidden]  # a field the new value hides cannot hold a refused value
        self.revision += 1
        return self.refused.get(path)

    def _follow_qlora_choice(self, tuner_type: Any) -> None:
        """Choosing QLoRA in the form means a quantized base, and swift quantizes only with a method:
        bnb is set with the choice (unless one is set) and cleared again when the choice goes."""
        tuner = self.profile.tuner
        if tuner_type == "qlora" and tuner.quant_method is None:
            set_value(self.profile, "tuner.quant_method", "bnb")
            self.quant_method_chosen_for_qlora = True
        elif tuner_type != "qlora" and self.quant_method_chosen_for_qlora:
            set_value(self.profile, "tuner.quant_method", None)
            self.quant_method_chosen_for_qlora = False

    def refuse(self, path: str, message: str) -> None:
        """Text that could not even be parsed (the profile keeps its value)."""
        self.refused[path] = message
        self.revision += 1

    def choose_model(self, source: str) -> str | None:
        """Take a model from the picker; what else changed with it, when something did.

        swift cannot infer model_type/template for the built-in models: they are set with one,
        and cleared again when another model replaces it."""
        model = self.profile.model
        had_builtin_types = (model.model_type, model.template) == BUILTIN_SWIFT_TYPES
        self.set("model.source", source)
        if is_builtin(source) and model.model_type is None and model.template is None:
            self.set("model.model_type", BUILTIN_SWIFT_TYPES[0])
            self.set("model.template", BUILTIN_SWIFT_TYPES[1])
            return "model_type qwen2 and template qwen set: swift cannot infer them for the built-in model."
        if not is_builtin(source) and had_builtin_types:
            self.set("model.model_type", None)
            self.set("model.template", None)
            return "model_type/template of the built-in model cleared; see the Model tab for swift's inference."
        return None

    def adopt(self, other: ProfileDocument) -> None:
        """Become another opened profile (the same document object stays shown)."""
        self.profile, self.path, self.saved_text = other.profile, other.path, other.saved_text
        self.refused = {}
        self.open_problem = other.open_problem
        self.revision += 1
        self.generation += 1

    # ------------------------------------------------------------ the file

    def save(self, path: Path | None = None) -> Path:
        """Write the profile to `path` (default: its own file); SaveRefused says why not."""
        target = Path(path or self.path or "")
        if not str(target) or target == Path():
            raise SaveRefused("the profile has no file yet: save it as a new one")
        if self.refused:
            raise SaveRefused(f"fix the refused values first: {', '.join(self.refused)}")
        try:  # the file it came from lends its comments and key order (save as: to the new file)
            save_profile(self.profile, target, layout=self.path)
        except OSError as err:
            raise SaveRefused(f"{target}: {err}") from None
        self.saved_text = profile_to_toml(self.profile)
        self.path = target.resolve()
        self.revision += 1
        return target

    def save_as(self, path: Path) -> Path:
        """Save under a new name; relative local paths are rebased onto its folder once the save succeeds."""
        path = Path(path).resolve()
        candidate = self.profile.model_copy(deep=True)
        for name in REBASED_FIELDS:
            value = get_value(candidate, name)
            if isinstance(value, list):
                rebased: Any = [rebase_ref(ref, self.base_dir, path.parent) for ref in value]
            else:
                rebased = rebase_ref(value, self.base_dir, path.parent) if value and looks_local(value) else value
            if rebased != value:
                set_value(candidate, name, rebased)
        original = self.profile
        self.profile = candidate
        try:
            return self.save(path)
        except SaveRefused:
            self.profile = original  # nothing changes when the save is refused
            raise

    def diff_text(self) -> str:
        """Unified diff: the saved file (canonical form) -> the form."""
        if self.path is None or not self.path.is_file():
            saved, name = "", "(no saved file)"
        else:
            name = display_path(self.path)
            try:
                saved = profile_to_toml(load_profile(self.path))
            except ProfileError:
                saved = self.path.read_text(encoding="utf-8", errors="replace")
        lines = difflib.unified_diff(saved.splitlines(keepends=True),
                                     profile_to_toml(self.profile).splitlines(keepends=True),
                                     fromfile=f"{name} (saved)", tofile="form")
        return "".join(lines)


# ---------------------------------------------------------------- helpers


def first_message(err: ValidationError) -> str:
    return err.errors()[0]["msg"].removeprefix("Value error, ")


def profile_label(path: Path) -> str:
    """Shipped profiles by their place in the package, others relative to cwd or home."""
    shipped = SHIPPED_PROFILES_DIR.resolve()
    if path.resolve().is_relative_to(shipped):
        return f"{shipped.name}/{path.resolve().relative_to(shipped)}"
    return display_path(path)


def rebase_ref(ref: str, old_base: Path, new_base: Path) -> str:
    """A relative local path that named a file next to the old profile, made to name it from the new one."""
    if is_builtin(ref) or Path(ref).is_absolute() or ref.startswith("~"):
        return ref
    path_part, sep, sample = ref.partition("#")
    if not (old_base / path_part).exists() or old_base.resolve() == new_base.resolve():
        return ref
    relative = os.path.relpath((old_base / path_part).resolve(), new_base.resolve())
    relative = relative if relative.startswith("..") else "./" + relative
    return relative + sep + sample


def looks_like_profile(path: Path) -> bool:
    """TOML with a profile's sections (pyproject.toml and friends are not offered)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True  # a broken profile is still offered: opening it explains what is wrong
    return bool({"model", "data", "tuner", "training"} & set(data))


def check_profile(path: Path) -> str | None:
    try:
        load_profile(path)
    except ProfileError as err:
        return "; ".join(str(p) for p in err.problems[:3])
    return None


def profile_choices(cwd: Path) -> list[tuple[str, str]]:
    """(label, path) of the shipped profiles and the profiles in `cwd`, for the open dialog."""
    candidates = sorted(SHIPPED_PROFILES_DIR.glob("*.toml")) + sorted(cwd.glob("*.toml"))
    return [(display_path(p), str(p)) for p in dict.fromkeys(c.resolve() for c in candidates)
            if looks_like_profile(p)]
