"""The forecast a run stores at launch reads the profile's data from the profile's folder, not from the
folder the command was started in (#26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.data.swift_view import remember, request_for
from backend.profile import LaunchProfile
from backend.runs import start
from backend.runs.start import start_run

ROW = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'


def test_launch_from_another_folder_sizes_an_unset_max_length_from_the_profiles_data(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "rows.jsonl").write_text(ROW * 4)
    profile = LaunchProfile.model_validate({
        "name": "relative", "model": {"source": "builtin:tiny-qwen2", "template": "qwen", "torch_dtype": "float32"},
        "data": {"train": ["rows.jsonl"]}, "training": {"max_steps": 1}})
    remember(request_for(profile, folder, build_model=False), {"token_lengths": {"max": 300, "p50": 12}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # rows.jsonl is not here: only the profile's folder has it
    monkeypatch.setattr(start, "_start_supervisor", lambda run, plan: None)  # the forecast is all we need
    run = start_run(profile, base_dir=folder)
    forecast = json.loads(run.forecast_path.read_text())
    assert forecast["request"]["max_length"] == 300
    assert "the data's longest is 300 tokens (swift's report)" in " ".join(forecast["notes"])
