"""backend/models/refs.py: the one resolver of model and dataset references, against cache layouts built by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from backend.core.paths import BUILTIN_DATASETS
from backend.models.refs import dataset_ref, model_config_dir, resolve_dataset, resolve_model, resolve_model_ref

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    return path


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    return tmp_path


def test_hf_cache_follows_refs_main_not_the_newest_folder(caches: Path) -> None:
    repo = caches / "hf" / "hub" / "models--Org--Model-7B"
    main = _folder(repo / "snapshots" / "1111")
    newer = _folder(repo / "snapshots" / "2222")
    os.utime(newer, (2e9, 2e9))  # newest by modification time, but not what refs/main names
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1111")
    found = resolve_model_ref("Org/Model-7B")
    assert (found.origin, found.path, found.hub_id) == ("hf-cache", main, "Org/Model-7B")
    assert resolve_model("Org/Model-7B") == "Org/Model-7B"  # swift still gets the hub id


def test_modelscope_cache_with_its_dot_naming_in_both_layouts(caches: Path) -> None:
    flat = _folder(caches / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B")
    assert resolve_model_ref("Qwen/Qwen2.5-0.5B").path == flat
    assert resolve_model_ref("Qwen/Qwen2.5-0.5B").origin == "modelscope-cache"
    assert model_config_dir("Qwen/Qwen2.5-0.5B") == flat


def test_hub_id_in_no_cache_says_swift_downloads_it(caches: Path) -> None:
    found = resolve_model_ref("nobody/Nothing-1B")
    assert found.origin == "hub" and found.path is None and "downloads it at launch" in (found.problem or "")
    with pytest.raises(LookupError, match="neither the Hugging Face nor the ModelScope cache"):
        model_config_dir("nobody/Nothing-1B")


def test_local_folders_relative_to_the_profile(tmp_path: Path) -> None:
    model = _folder(tmp_path / "profiles" / "models" / "mine")
    found = resolve_model_ref("models/mine", base_dir=tmp_path / "profiles")
    assert (found.origin, found.path) == ("local", model)
    assert resolve_model("models/mine", tmp_path / "profiles") == str(model)
    missing = resolve_model_ref("./no/such/folder")
    assert missing.origin == "local" and "does not exist" in (missing.problem or "")


def test_builtin_model_and_unknown_builtin() -> None:
    assert resolve_model_ref("builtin:tiny-qwen2").origin == "builtin"
    assert "unknown built-in model" in (resolve_model_ref("builtin:nope").problem or "")


def test_run_reference_without_such_run_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "runs"))
    found = resolve_model_ref("run:20990101-nothing")
    assert found.origin == "run" and found.path is None and found.problem


def test_dataset_references(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    assert resolve_dataset("builtin:self-cognition") == str(BUILTIN_DATASETS["self-cognition"])
    assert resolve_dataset("rows.jsonl#5", tmp_path) == f"{data}#5"
    assert resolve_dataset("AI-ModelScope/alpaca-gpt4-data-en") == "AI-ModelScope/alpaca-gpt4-data-en"
    ref = dataset_ref("rows.jsonl#5", tmp_path)
    assert (ref.kind, ref.path, ref.sample) == ("local", data, 5)
    assert dataset_ref("./gone.jsonl").kind == "missing"
    assert dataset_ref("org/hub-set").kind == "hub"
    assert "row count" in (dataset_ref("rows.jsonl#0", tmp_path).problem or "")


def test_validation_names_a_run_reference_without_a_merged_model(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from backend.hardware.machine import detect_hardware
    from backend.launch.validate import validate
    from backend.profile import LaunchProfile

    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "runs"))
    profile = LaunchProfile.model_validate({"model": {"source": "run:20990101-nothing"}})
    found = [p for p in validate(profile, detect_hardware()) if p.field == "model.source"]
    assert found and found[0].severity == "error" and "workbench merge" in found[0].fix
