"""One real training of the full quickstart profile, shared by the merge, chat and inference tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import train_quickstart


@pytest.fixture(scope="session")
def quill_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    """The quickstart profile trained to its end: 318 LoRA steps at lr 3e-3 teach the tiny
    model its name (Quill); loss ends near 0.2. Checkpoints 200, 300 and 318 are kept.
    About 15 s on an idle 2-core machine (most of it swift's start-up)."""
    return train_quickstart(tmp_path_factory.mktemp("quill-runs"))
