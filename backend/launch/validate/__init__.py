"""Pre-launch checks: profile + hardware -> every problem at once, each with field, why and fix.

Errors block a launch; warnings are shown and allowed. Each rule is a small function in the module of its
concern (precision, distribution, inputs), so a reader finds the one that fired by its field name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import distribution, inputs, precision  # noqa: F401 - importing registers their rules
from backend.launch.validate.core import PATH_RULES, RULES, PathRule, Problem, Rule, Severity, errors, register_rules
from backend.launch.validate.distribution import experts_untouched, host_memory
from backend.launch.validate.hub import hub_downloads
from backend.launch.validate.inputs import dataset_files, names_libraries_know, paths_exist
from backend.launch.validate.model_config import config_refused
from backend.launch.validate.swift_build import swift_builds
from backend.models.resolved import ResolvedProfile, resolve_profile
from backend.profile import LaunchProfile

__all__ = ["PathRule", "Problem", "ResolvedProfile", "Rule", "Severity", "errors", "register_rules", "resolve_profile",
           "validate"]


def validate(profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None = None, *,
             ask_data: bool = False, progress: Callable[[str], object] | None = None,
             resolved: ResolvedProfile | None = None) -> list[Problem]:
    """All problems of `profile` on `hardware`, errors first. `ask_data`: have swift build the run's
    arguments and read the datasets (child processes, cached); otherwise only already known answers are
    used. `progress` hears what a first (cold) question is doing (the terminal's stderr when None).
    `resolved`: the launch's model and datasets as its caller resolved them (resolved here when None)."""
    found = resolved or resolve_profile(profile, base_dir)
    base_dir = found.base_dir
    problems = [p for check in RULES for p in check(profile, hardware)]
    problems += list(paths_exist(profile, found))
    problems += [p for check in PATH_RULES for p in check(profile, base_dir)]
    problems += list(hub_downloads(profile, found, probe=ask_data))
    problems += list(host_memory(profile, hardware, found))
    problems += list(experts_untouched(profile, found))
    problems += list(names_libraries_know(profile, found, ask=ask_data))
    if not any(p.severity == "error" and p.field.startswith("model") for p in problems):
        problems += list(config_refused(profile, found, ask=ask_data, progress=progress))
    if not any(p.severity == "error" and p.field.startswith(("model", "extra_swift_args")) for p in problems):
        problems += list(swift_builds(profile, hardware, found, ask=ask_data, progress=progress))
    hostile = list(dataset_files(found, read=ask_data))
    problems += hostile
    # swift reads the data only once the model and the data themselves are sound (no child for `--help`);
    # a FIFO or a symlink loop is never handed on at all (even the cache key's read would block on it)
    unsound = any(p.severity == "error" and p.field.startswith(("model", "data", "template")) for p in problems)
    if not hostile:
        problems += list(_data_as_swift_reads_it(profile, found, ask_data and not unsound))
    return sorted(problems, key=lambda p: p.severity != "error")


def _data_as_swift_reads_it(profile: LaunchProfile, resolved: ResolvedProfile, ask: bool) -> Iterator[Problem]:
    """Unreadable/empty datasets (errors), dropped, over-long and untrained rows (warnings): #12."""
    from backend.data.swift_view import profile_data_problems

    for field, severity, message, fix in profile_data_problems(profile, resolved.base_dir, ask=ask,
                                                               resolved=resolved):
        yield Problem(field, severity, message, fix)  # type: ignore[arg-type]
