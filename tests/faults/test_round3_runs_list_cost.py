"""The runs list reloads every 2 s: each run folder's path is resolved once a listing (#22; with 500
damaged folders, resolving each about 3 times was half of a first reload's 250-315 ms CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.rundir import index
from tests.faults import helpers as h


def test_each_folder_is_resolved_once(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [h.fake_run(workspace, f"20260101-1200{i:02d}-fake-{i:04x}") for i in range(20)]
    original = Path.resolve
    calls: list[str] = []

    def counted(self: Path, strict: bool = False) -> Path:
        calls.append(self.name)
        return original(self, strict)

    monkeypatch.setattr(Path, "resolve", counted)
    listed = index.known_folders()
    assert sorted(listed) == sorted(run.path for run in runs)
    assert max(calls.count(run.path.name) for run in runs) == 1
