"""backend/ never imports Textual; the CLI and TUI start-up never import torch, transformers or swift.

import-linter (pyproject.toml, run by tests/test_floors.py) sees every import statement, lazy ones in a
function included; what it cannot see is which of them run when a module is imported. That runtime side
is checked here in two interpreters, not one per module: the first imports the CLI, then every backend
module one after another and looks after each whether Textual got loaded (a module imported earlier is
not imported again, but it was checked when it was). The first module that loads it is named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKEND_MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts)
    for p in (REPO / "backend").rglob("*.py")
    if "plugin" not in p.parts and p.name != "__main__.py"
)
HEAVY = ("torch", "transformers", "swift", "peft", "accelerate")
FORBIDDEN_IN_BACKEND = ("textual", "textual_plotext")

# one child: the heavy modules loaded by the CLI's start-up (every command registered), then the first module that loads Textual
WALK = """
import importlib, json, sys
modules, heavy, forbidden = json.loads(sys.argv[1])
import backend.cli
from backend.cli.app import full_app
from backend.cli.wiring import install
full_app(), install()  # what every `workbench COMMAND` does before the command runs
started = [m for m in heavy if m in sys.modules]
for module in modules:
    importlib.import_module(module)
    loaded = [m for m in forbidden if m in sys.modules]
    if loaded:
        print(json.dumps({"cli_heavy": started, "culprit": module, "loaded": loaded}))
        break
else:
    print(json.dumps({"cli_heavy": started, "culprit": None, "loaded": []}))
"""


def _child(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_no_backend_module_loads_textual_and_the_cli_starts_light() -> None:
    assert len(BACKEND_MODULES) > 100  # the walk sees the whole backend, not an empty glob
    walk = json.dumps([["backend.cli", *BACKEND_MODULES], HEAVY, FORBIDDEN_IN_BACKEND])
    answer = json.loads(_child(WALK, walk).splitlines()[-1])
    assert answer["culprit"] is None, f"importing {answer['culprit']} loads {answer['loaded']}"
    assert answer["cli_heavy"] == [], f"the CLI's start-up (its commands built, wired) loads {answer['cli_heavy']}"


def test_tui_start_up_imports_nothing_heavy() -> None:
    code = ("import sys, tui.app, tui.screens.launch, tui.screens.runs, tui.screens.monitor, tui.screens.chat; "
            "print(' '.join(sys.modules))")
    loaded = set(_child(code).split())
    assert not [m for m in HEAVY if m in loaded]


def test_the_first_frames_path_leaves_numpy_for_later() -> None:
    """What `workbench` imports before its first frame (the CLI, the plug-ins wired, the app, the launch
    screen) leaves numpy and the metrics store to the screens that plot (#41: ~0.1 s of the first frame)."""
    code = ("import sys, backend.cli, tui.app, tui.screens.launch; from backend.cli.wiring import install; "
            "install(); print(' '.join(sys.modules))")
    loaded = set(_child(code).split())
    assert [m for m in ("numpy", "backend.series") if m in loaded] == []
