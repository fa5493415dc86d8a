"""What a problem is (field, severity, message, fix) and the registry of rules: each rule module registers
its rules with `@rule` as it is imported (backend/launch/validate/__init__.py imports them all); the floors above
register theirs with `register_rules` at start-up (backend.cli.wiring)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.hardware.machine import HardwareInfo
from backend.profile import LaunchProfile

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    field: str
    severity: Severity
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.severity}: [{self.field}] {self.message} Fix: {self.fix}"


Rule = Callable[[LaunchProfile, HardwareInfo], Iterator[Problem]]
# a rule about the profile's folders (base_dir: the profile's folder, for relative paths)
PathRule = Callable[[LaunchProfile, Path | None], Iterator[Problem]]
RULES: list[Rule] = []
PATH_RULES: list[PathRule] = []


def rule(func: Rule) -> Rule:
    RULES.append(func)
    return func


def register_rules(rules: Iterable[Rule] = (), path_rules: Iterable[PathRule] = ()) -> None:
    """Rules of the floors above (the [watch]/[notify] keys, output_dir's owner), registered by
    backend.cli.wiring at CLI and TUI start-up; registering one twice keeps one."""
    RULES.extend(r for r in rules if r not in RULES)
    PATH_RULES.extend(r for r in path_rules if r not in PATH_RULES)


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def on_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> bool:
    return profile.distribution.device == "cpu" or (profile.distribution.device == "auto" and not hardware.has_cuda)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
