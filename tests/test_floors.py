"""Imports run one way, floor by floor, and go round in no circle (#23).

The floors are the layers of pyproject.toml's import-linter contract (top floor first):
faces (tui, cli) -> lifecycle (runs, jobs, watch, export) -> launch (command, validate ...) ->
knowledge (oracle, estimate, refs ...) -> ground (paths, fs, profile ...). Two checks read them:
import-linter itself, and a scan of every module's syntax tree here (imports inside functions and
under TYPE_CHECKING included), which also finds circles and modules that belong to no floor.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
FLOORS_CONTRACT = next(c for c in CONFIG["contracts"] if c["id"] == "floors")

# Circles still to be broken, by the edge that closes each, in files their owners were still reshaping
# when the floors were drawn (#23). Remove a line when its edge is gone (the test says so).
KNOWN_CIRCLE_EDGES: dict[tuple[str, str], str] = {
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*REPO.glob("backend/**/*.py"), *REPO.glob("tui/**/*.py")]:
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project's modules one import statement imports (as import-linter counts them: `from a
    import b` is a.b when that is a module, else a)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    out = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= _targets(module, node)
    return graph


def _floor_of(module: str) -> int | None:
    """0 for the ground floor up to 4 for the faces; None for a module placed on no floor."""
    layers = FLOORS_CONTRACT["layers"]
    best: tuple[int, int] | None = None  # (length of the matched prefix, floor)
    for index, layer in enumerate(layers):
        for name in (part.strip() for part in layer.replace("|", ":").split(":")):
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[0]:
                    best = (len(name), len(layers) - 1 - index)
    return None if best is None else best[1]


def _ignored() -> set[tuple[str, str]]:
    """The contract's named exceptions (`ignore_imports`: "importer -> imported")."""
    pairs = (line.split("->") for line in FLOORS_CONTRACT.get("ignore_imports", []))
    return {(a.strip(), b.strip()) for a, b in pairs}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_stands_on_a_floor() -> None:
    homeless = sorted(m for m in MODULES if _floor_of(m) is None and m not in ("backend", "tui"))
    assert homeless == [], f"place these in a floor of pyproject.toml's [tool.importlinter] layers: {homeless}"


def test_no_import_runs_up_a_floor() -> None:
    graph, ignored = _graph(), _ignored()
    up = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                if (_floor_of(a) or 0) < (_floor_of(b) or 0) and (a, b) not in ignored)
    assert up == [], "imports that run up a floor (lazy ones too):\n" + "\n".join(up)
    stale = sorted(f"{a} -> {b}" for a, b in ignored if b not in graph.get(a, set()))
    assert stale == [], f"named exceptions whose import is gone: remove them from pyproject.toml: {stale}"


def test_no_import_circle() -> None:
    graph = _graph()
    stale = sorted(f"{a} -> {b}" for a, b in KNOWN_CIRCLE_EDGES if b not in graph.get(a, set()))
    assert stale == [], f"named circle edges that are gone: remove them from KNOWN_CIRCLE_EDGES: {stale}"
    for a, b in KNOWN_CIRCLE_EDGES:
        graph[a].discard(b)
    circles = _circles(graph)
    assert circles == [], "import circles (imports inside functions included):\n" + "\n".join(map(str, circles))


def test_import_linter_contracts_are_kept() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
                          capture_output=True, text=True, cwd=REPO, timeout=scaled(300))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_backend_has_no_loose_module_at_its_top() -> None:
    """One feature, one folder (#33): a module added straight under backend/ belongs to no room, even when
    someone also adds it to the layers."""
    loose = sorted(p.name for p in (REPO / "backend").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"move these into the room of their feature (backend/<room>/): {loose}"


MAX_LINES = 400  # a file longer than this does more than one thing: split it by concern, not by size


def test_no_product_file_is_over_400_lines() -> None:
    """A newcomer reads a file whole (#33): none of backend/ or tui/ runs past 400 lines."""
    long = sorted(f"{p.relative_to(REPO)} ({n} lines)" for p in [*(REPO / "backend").rglob("*.py"),
                                                                 *(REPO / "tui").rglob("*.py")]
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert long == [], f"split these by concern: {long}"
