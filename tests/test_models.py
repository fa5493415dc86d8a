"""Model discovery and description from config.json alone (backend/models/registry.py)."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from backend.models.registry import (
    builtin_info,
    describe_source,
    discover_models,
    format_count,
    infer_swift_types,
    read_model_dir,
    scan_hf_cache,
    scan_local,
    scan_modelscope_cache,
    shape_of_config,
    swift_model_name,
)


def shape_from_config(config: dict):
    shape, problems = shape_of_config(config)
    assert shape is not None, problems
    return shape

REPO = Path(__file__).resolve().parents[1]

# config.json of two published models, with the parameter totals their model cards publish
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-05,
}
LLAMA2_7B_PARAMETERS = 6_738_415_616
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "tie_word_embeddings": True,
}
QWEN25_05B_PARAMETERS = 494_032_768


def _safetensors_elements(folder: Path) -> int:
    """Elements of every tensor, from the safetensors headers (no weights read)."""
    total = 0
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def _model_folder(root: Path, config: dict, weights: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    if weights:
        (root / "model.safetensors").write_bytes(b"")
    return root


def test_tiny_model_shape_matches_its_weights(tiny_model: Path) -> None:
    info = read_model_dir(tiny_model)
    config = json.loads((tiny_model / "config.json").read_text())
    shape = info.shape
    assert shape is not None and shape.family_known
    assert shape.parameters == _safetensors_elements(tiny_model)
    rows = dict(shape.describe())
    # "2", or "2 (Qwen2DecoderLayer)" once transformers has been asked for the model's exact shape (the session's
    # cache: another test may have asked it first)
    assert rows["layers"] in (str(config["num_hidden_layers"]), f"{config['num_hidden_layers']} (Qwen2DecoderLayer)")
    assert rows["hidden size"] == str(config["hidden_size"])
    assert rows["heads"] == f"{config['num_attention_heads']} ({config['num_key_value_heads']} key/value)"
    assert rows["vocab"] == f"{config['vocab_size']:,} (tied embeddings)"
    assert rows["context"] == f"{config['max_position_embeddings']:,}"
    assert rows["architecture"] == "Qwen2ForCausalLM"


@pytest.mark.parametrize("config, published", [(LLAMA2_7B, LLAMA2_7B_PARAMETERS),
                                               (QWEN25_05B, QWEN25_05B_PARAMETERS)], ids=["llama2-7b", "qwen2.5-0.5b"])
def test_parameter_count_of_published_models(config: dict, published: int) -> None:
    shape = shape_from_config(config)
    assert shape.parameters == published and shape.family_known


def test_multimodal_config_reads_the_language_model() -> None:
    shape = shape_from_config({"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
                               "text_config": {**QWEN25_05B, "model_type": "qwen2"}})
    assert (shape.num_layers, shape.hidden_size) == (24, 896)


def test_unknown_family_is_marked_as_an_estimate() -> None:
    shape = shape_from_config({**LLAMA2_7B, "model_type": "somethingnew"})
    assert not shape.exact and shape.count_label == "estimated, not exact (formula)"
    assert dict(shape.describe())["parameters"].startswith("≈ 6.74 B")
    assert format_count(shape.parameters, exact=False).startswith("≈ 6.74 B")


def test_missing_or_broken_config_is_reported(tmp_path: Path) -> None:
    empty = read_model_dir(tmp_path)
    assert empty.shape is None and "config.json" in empty.problems[0]
    (tmp_path / "config.json").write_text("{not json")
    assert "cannot be read" in read_model_dir(tmp_path).problems[0]


def test_caches_and_local_folders_are_discovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf = tmp_path / "hf"
    repo = hf / "models--meta-llama--Llama-2-7b-hf"
    snapshot = _model_folder(repo / "snapshots" / "abc123", LLAMA2_7B)
    # a newer-looking snapshot that refs/main does not point at must not win
    other = _model_folder(repo / "snapshots" / "fff999", {**LLAMA2_7B, "num_hidden_layers": 1})
    os.utime(other / "config.json", (2e9, 2e9))
    os.utime(other, (2e9, 2e9))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    ms = tmp_path / "ms"
    ms_model = _model_folder(ms / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct", QWEN25_05B)
    local = _model_folder(tmp_path / "work" / "my-finetune", QWEN25_05B)
    _model_folder(tmp_path / "work" / "not-a-model", QWEN25_05B, weights=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(hf))
    monkeypatch.setenv("MODELSCOPE_CACHE", str(ms))

    (hf_model,) = scan_hf_cache()
    assert hf_model.label == "meta-llama/Llama-2-7b-hf (HF cache)" and hf_model.ref == str(snapshot)
    assert hf_model.shape.parameters == LLAMA2_7B_PARAMETERS
    (modelscope,) = scan_modelscope_cache()
    assert modelscope.label == "Qwen/Qwen2.5-0.5B-Instruct (ModelScope cache)" and modelscope.path == ms_model
    assert [m.path for m in scan_local([tmp_path / "work"])] == [local.resolve()]

    everything = discover_models([tmp_path / "work"])
    assert [m.origin for m in everything][:1] == ["builtin"]
    assert {"local", "hf-cache", "modelscope-cache"} <= {m.origin for m in everything}

    # a typed hub id resolves to its cached copy; swift sees the name it matches on
    cached = describe_source("Qwen/Qwen2.5-0.5B-Instruct")
    assert cached.origin == "modelscope-cache" and cached.shape.num_layers == 24
    llama = describe_source("meta-llama/Llama-2-7b-hf")
    assert llama.origin == "hf-cache" and llama.path == snapshot and llama.shape.num_layers == 32
    assert swift_model_name(str(snapshot)) == "Llama-2-7b-hf"
    assert swift_model_name(str(ms_model)) == "Qwen2.5-0.5B-Instruct"
    unknown = describe_source("nobody/NoSuchModel-1B")
    assert unknown.origin == "hub" and unknown.shape is None and unknown.problems


def test_builtin_model_needs_its_types_named(tiny_model: Path) -> None:
    info = builtin_info("tiny-qwen2")
    assert info.built and info.path == tiny_model
    inference = infer_swift_types(info, None)
    assert (inference.model_type, inference.template, inference.how) == ("qwen2", "qwen", "builtin")


def test_inference_waits_for_the_registry_and_respects_the_profile(tiny_model: Path) -> None:
    plain = read_model_dir(tiny_model)
    assert infer_swift_types(plain, None).how == "unknown"
    given = infer_swift_types(plain, None, model_type="qwen2", template="qwen")
    assert (given.model_type, given.template, given.how) == ("qwen2", "qwen", "profile")


@pytest.fixture(scope="session")
def swift_registry(workbench_home: Path) -> dict:
    from backend.models.registry import build_swift_registry, load_swift_registry

    return load_swift_registry() or build_swift_registry()


SWIFT_SAYS = """
import json, sys
from swift.model.model_meta import get_matched_model_meta, get_matched_model_types
out = {}
for path in sys.argv[1:]:
    meta = get_matched_model_meta(path)
    out[path] = [meta.model_type, meta.template] if meta else None
out["arch:Qwen2ForCausalLM"] = get_matched_model_types(["Qwen2ForCausalLM"])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_inference_agrees_with_swift(tmp_path: Path, swift_registry: dict, tiny_model: Path) -> None:
    named = _model_folder(tmp_path / "Qwen2.5-0.5B-Instruct", QWEN25_05B)
    cached = _model_folder(tmp_path / "hub" / "models--meta-llama--Llama-2-7b-hf" / "snapshots" / "r1", LLAMA2_7B)
    anonymous = read_model_dir(tiny_model)  # a folder name swift does not know
    done = subprocess.run([sys.executable, "-c", SWIFT_SAYS, str(named), str(cached), str(tiny_model)],
                          capture_output=True, text=True, check=True, cwd=REPO)
    swift = json.loads(done.stdout.strip().splitlines()[-1])
    for folder in (named, cached):
        ours = infer_swift_types(read_model_dir(folder), swift_registry)
        assert [ours.model_type, ours.template] == swift[str(folder)]
        assert ours.how == "name" and not ours.warnings
    ours = infer_swift_types(anonymous, swift_registry)
    assert swift[str(tiny_model)] is None
    assert ours.model_type is None and list(ours.model_type_choices) == swift["arch:Qwen2ForCausalLM"]
    assert ours.warnings and "choose one" in ours.warnings[0]
    # with model_type chosen, swift still needs a template for qwen2 (it has many): the choices are offered
    chosen = infer_swift_types(anonymous, swift_registry, model_type="qwen2")
    assert chosen.model_type == "qwen2" and chosen.template is None
    assert "qwen" in chosen.template_choices and "template" in chosen.warnings[0]
