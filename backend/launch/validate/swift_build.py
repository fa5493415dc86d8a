"""The rule that has swift build the run's own arguments before validate says yes (#35).

The exact argv the launch passes after `-m swift.cli.<task>` goes to the oracle question `swift_build`
(backend/oracle/swift_build.py): swift's argument dataclass and its `__post_init__` run in a child, with
the output folder a scratch one, no weights loaded. What swift raises comes back as problems naming the
profile key and the fix: a model_type or template it cannot infer, a library a flag needs, any other
refusal in swift's own words. Cached by the libraries' versions, the argv and the model's small files.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from backend.core.paths import BUILTIN_SWIFT_TYPES
from backend.hardware.machine import HardwareInfo
from backend.launch.validate.core import Problem
from backend.models.resolved import ResolvedProfile, resolve_profile
from backend.profile import LaunchProfile

QUESTION = "swift_build"
SCRATCH = "<scratch>"  # backend/oracle/swift_build.py puts its scratch folder here
# what the answer depends on besides the argv: swift and the packages its flags need
LIBRARIES = ("ms-swift", "transformers", "torch", "peft", "accelerate", "deepspeed", "liger-kernel", "flash-attn",
             "bitsandbytes", "autoawq", "gptqmodel", "unsloth")
MODEL_FILES = ("config.json", "tokenizer_config.json", "generation_config.json", "args.json")
BUILTIN_MARK = "workbench_builtin.json"  # a folder the workbench built: its swift types are BUILTIN_SWIFT_TYPES
Progress = Callable[[str], object]


def swift_builds(profile: LaunchProfile, hardware: HardwareInfo, resolved: ResolvedProfile, *, ask: bool,
                 progress: Progress | None = None) -> Iterator[Problem]:
    """What swift raises when it builds this profile's arguments (`ask`: a child when not cached, else the
    cache only: nothing is said before swift was asked)."""
    request = launch_argv(profile, hardware, resolved.base_dir, resolved=resolved)
    if request is None:
        return
    payload, inputs, model_dir = request
    answer = _answer(payload, inputs, ask=ask, progress=progress)
    if answer is None:
        return
    for found in answer.get("problems", []):
        yield _problem(found, profile, model_dir)


def launch_argv(profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None, *,
                resolved: ResolvedProfile | None = None) -> tuple[dict[str, Any], list[Path], Path] | None:
    """(payload: the command and the argv after `-m swift.cli.<task>`, input files, model folder), or None
    when there is nothing local for swift to read (a hub id: the offline rule says what it downloads) or the
    launch cannot be built (other rules say why).
    `resolved`: the model and datasets as the launch resolved them (resolved here when None)."""
    from backend.launch.command import FlagLikeValue, build_launch

    resolved = resolved or resolve_profile(profile, base_dir)
    found = resolved.model
    if not found.found or found.path is None:
        return None
    run_dir = Path(tempfile.gettempdir()) / "workbench-validate"
    try:
        plan = build_launch(profile, run_dir, hardware, base_dir=base_dir, model_path=str(found.path),
                            resolved=resolved)
    except (FlagLikeValue, KeyError, OSError, RuntimeError, ValueError):
        return None
    entry = plan.argv.index(f"swift.cli.{profile.task}")
    argv = _scratch_output(plan.argv[entry + 1:], str(plan.output_dir))
    inputs = [found.path / name for name in MODEL_FILES if (found.path / name).is_file()]
    return {"command": profile.task, "argv": argv}, inputs, found.path


def _scratch_output(argv: list[str], output_dir: str) -> list[str]:
    """The argv with the output folder as the child's scratch placeholder (the cache key names no run)."""
    words = []
    for number, word in enumerate(argv):
        if word == output_dir and number and argv[number - 1] == "--output_dir":
            words.append(SCRATCH)
        elif word == f"--output_dir={output_dir}":
            words += ["--output_dir", SCRATCH]
        else:
            words.append(word)
    return words


def _answer(payload: dict[str, Any], inputs: list[Path], *, ask: bool,
            progress: Progress | None) -> dict[str, Any] | None:
    from backend.oracle import ask_or_cached

    return ask_or_cached(QUESTION, payload, libraries=LIBRARIES, inputs=inputs, ask_child=ask,
                         asking="asking swift to build the run's arguments (no weights loaded; once per swift "
                                "version and profile)...", what="to build the arguments", timeout=300,
                         progress=progress)


def _problem(found: dict[str, Any], profile: LaunchProfile, model_dir: Path) -> Problem:
    kind, flag, message = found.get("kind"), found.get("flag"), str(found.get("message", ""))
    field = _field(flag, profile)
    if kind in ("model_type", "template"):
        return _inference_problem(kind, found, model_dir)
    if kind == "library":
        package = found.get("package") or "the package named"
        return Problem(field, "error", f"swift needs a library that is not installed: {message}.",
                       f"pip install {package} into the workbench's environment ({sys.executable} -m pip install "
                       f"{package}), or remove {field}.")
    return Problem(field, "error", f"swift refuses the arguments this profile launches with: {message}",
                   f"Change {field} as swift says; `workbench show --explain` lists where each flag comes from."
                   if field != "swift" else "Change the profile as swift says; `workbench show --explain` lists "
                                            "where each flag comes from.")


def _inference_problem(kind: str, found: dict[str, Any], model_dir: Path) -> Problem:
    choices = [str(c) for c in found.get("choices") or []]
    suggested, why = found.get("suggested"), str(found.get("why") or "")
    if (model_dir / BUILTIN_MARK).is_file():  # the workspace built this model: it knows its types
        suggested, why = BUILTIN_SWIFT_TYPES[0 if kind == "model_type" else 1], "the workspace's built-in model"
    key = "model_type" if kind == "model_type" else "template"
    shown = ", ".join(choices) or "none"
    message = (f"swift cannot infer the {key} of this model: it sees [{shown}] and stops at launch "
               f"(\"Failed to automatically match `{'model_type' if kind == 'model_type' else 'template_type'}`\").")
    if suggested:
        return Problem(f"model.{key}", "error", message,
                       f"Set {key} = \"{suggested}\" in [model] ({why}), or another of [{shown}].")
    return Problem(f"model.{key}", "error", message, f"Set {key} in [model] to one of [{shown}].")


def _field(flag: str | None, profile: LaunchProfile) -> str:
    """The profile key that passes swift flag `flag` ("swift" when none does)."""
    from backend.launch.managed_flags import managed_flags

    if not flag:
        return "swift"
    if flag in profile.extra_swift_args:
        return f"extra_swift_args.{flag}"
    key = managed_flags().get(flag, "")
    return key if "." in key and " " not in key else f"swift --{flag}"
