"""Writing bash scripts that stay correct and shellcheck-clean (the words themselves: backend.core.shell_words)."""

from __future__ import annotations

import os
from pathlib import Path

from backend.core.fs import write_text_atomic


def write_script(path: Path, text: str) -> None:
    """Write atomically and make it executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    os.chmod(path, 0o755)
