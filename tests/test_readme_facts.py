"""What the README says about the shipped files is counted from them, never typed twice (#41)."""

from __future__ import annotations

import re
from pathlib import Path

from backend.core.paths import BUILTIN_DATASETS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_says_how_many_rows_the_built_in_dataset_has() -> None:
    rows = [line for line in BUILTIN_DATASETS["self-cognition"].read_text(encoding="utf-8").splitlines()
            if line.strip()]
    said = re.findall(r"its (\d+)-row dataset", " ".join(README.read_text(encoding="utf-8").split()))
    assert said == [str(len(rows))]


def test_the_readme_and_the_tui_guide_say_what_f6_does() -> None:
    """F6 shows the details pane's next tab (tui/widgets/details_pane.py); it enlarges nothing."""
    for path in (README, README.parent / "docs" / "tui.md"):
        text = " ".join(path.read_text(encoding="utf-8").split())
        assert "F6 enlarges" not in text, path.name
        assert re.search(r"F6 shows (its|the) next", text), path.name
