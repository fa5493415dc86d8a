"""One launch resolves its model and datasets once (#33 item 5): `start_run` resolves them, and validation, swift's
report on the data and the command builder take what it resolved. A folder moved after validation does not change
what the command names: rebuilt from the references, the command named another folder of the same name in the
folder the launch was started from, which nothing had validated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from backend.profile import LaunchProfile
from backend.runs import start
from backend.runs.start import start_run

ROW = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'


def _project(folder: Path, tiny_model: Path) -> Path:
    shutil.copytree(tiny_model, folder / "model")
    (folder / "rows.jsonl").write_text(ROW * 4)
    return folder


def test_the_command_names_the_model_and_data_that_were_validated(
    tiny_model: Path, isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "project", tiny_model)
    validated_model, validated_rows = (project / "model").resolve(), (project / "rows.jsonl").resolve()
    monkeypatch.chdir(_project(tmp_path / "elsewhere", tiny_model))  # the same names, never validated
    profile = LaunchProfile.model_validate(
        {
            "name": "moved",
            "model": {"source": "model", "model_type": "qwen2", "template": "qwen", "torch_dtype": "float32"},
            "data": {"train": ["rows.jsonl"]},
            "training": {"max_steps": 1},
        }
    )
    build = start.build_launch

    def moved_meanwhile(*args: Any, **kwargs: Any) -> Any:
        (project / "model").rename(project / "model-moved")
        (project / "rows.jsonl").rename(project / "rows-moved.jsonl")
        return build(*args, **kwargs)

    monkeypatch.setattr(start, "build_launch", moved_meanwhile)
    monkeypatch.setattr(start, "_start_supervisor", lambda run, plan: None)  # the command is all we need
    run = start_run(profile, base_dir=project)
    argv = json.loads(run.command_path.read_text())["argv"]
    assert argv[argv.index("--model") + 1] == str(validated_model)
    assert argv[argv.index("--dataset") + 1] == str(validated_rows)
