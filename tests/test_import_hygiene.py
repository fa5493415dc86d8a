"""backend/ never imports Textual; the CLI and TUI start-up never import torch, transformers or swift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BACKEND_MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts)
    for p in (REPO / "backend").rglob("*.py")
    if "plugin" not in p.parts and p.name != "__main__.py"
)
HEAVY = ("torch", "transformers", "swift", "peft", "accelerate")


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", BACKEND_MODULES)
def test_backend_module_imports_no_textual(module: str) -> None:
    loaded = _modules_after(f"import {module}")
    assert "textual" not in loaded


def test_cli_start_up_imports_nothing_heavy() -> None:
    loaded = _modules_after("import backend.cli")
    assert not [m for m in HEAVY if m in loaded]


def test_tui_start_up_imports_nothing_heavy() -> None:
    loaded = _modules_after("import tui.app, tui.screens.launch, tui.screens.runs, tui.screens.monitor, tui.screens.chat")
    assert not [m for m in HEAVY if m in loaded]
