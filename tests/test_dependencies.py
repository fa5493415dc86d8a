"""Every library the code imports is declared in pyproject.toml, and the installed versions are inside the
declared ranges (the ranges the private-internals smoke tests passed on)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
OURS = {"backend", "tui"}


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    # the eval and cloud extras too: backend/evaluation/worker.py imports EvalScope, backend/oracle/sky_task.py
    # SkyPilot (the test extra installs both)
    extras = project["optional-dependencies"]
    return [Requirement(line) for line in [*project["dependencies"], *extras["eval"], *extras["cloud"]]]


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _imported_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it, for every import in backend/ and tui/ (lazy ones too)."""
    found: dict[str, str] = {}
    for path in sorted([*ROOT.joinpath("backend").rglob("*.py"), *ROOT.joinpath("tui").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_imported_library_is_declared() -> None:
    declared = {_name(r.name) for r in _declared()}
    owners = packages_distributions()
    undeclared = sorted(
        f"{module} ({', '.join(owners.get(module, ['not installed']))}) imported in {where}"
        for module, where in _imported_modules().items()
        if module not in sys.stdlib_module_names and module not in OURS and module != "__future__"
        and not declared & {_name(d) for d in owners.get(module, [])})
    assert undeclared == []


def test_installed_versions_are_inside_the_declared_ranges() -> None:
    outside = [f"{r.name} {version(r.name)} not in {r.specifier}" for r in _declared()
               if (r.marker is None or r.marker.evaluate()) and not r.specifier.contains(version(r.name),
                                                                                           prereleases=True)]
    assert outside == []
