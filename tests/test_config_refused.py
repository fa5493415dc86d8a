"""Configs transformers would refuse are refused, never sized (#35): `workbench estimate` and `workbench validate`
ask transformers to build the config (and the model, on the meta device) in the model-shape child, and say
what it says. The tiny Qwen2's config.json with one value broken at a time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.faults import helpers as h

GOOD = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
BROKEN = {
    "no positions": ({"max_position_embeddings": 0},
                     "max_position_embeddings = 0: Qwen2Config accepts it, but a model needs at least 1 (the longest "
                     "sequence the model takes, in tokens)"),
    "3 kv heads for 4": ({"num_key_value_heads": 3},
                         "num_attention_heads (4) is not a multiple of num_key_value_heads (3): Qwen2ForCausalLM's "
                         "forward raises RuntimeError: The size of tensor a (4) must match the size of tensor b (3) "
                         "at non-singleton dimension 1"),
    "hidden 66 for 4 heads": ({"hidden_size": 66},
                              "The hidden size (66) is not a multiple of the number of attention heads (4). "
                              "(transformers' check of LlamaConfig; Qwen2Config would give each head 16 of its 66 "
                              "dimensions)"),
}


def _broken_model(tiny_model: Path, folder: Path, change: dict[str, int]) -> Path:
    model = folder / "my-model"
    shutil.copytree(tiny_model, model, ignore=shutil.ignore_patterns("workbench_builtin.json"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **change}))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("case", BROKEN)
def test_estimate_refuses_the_config_in_transformers_words(case: str, tiny_model: Path, tmp_path: Path) -> None:
    change, words = BROKEN[case]
    model = _broken_model(tiny_model, tmp_path, change)
    result = h.cli("estimate", "--model", str(model))
    said = " ".join(result.output.split())
    assert result.exit_code == 2, said
    assert f"{model / 'config.json'}: transformers " in said
    assert f"refuses this model's config, so nothing is sized from it: {words}" in said
    assert "GPU" not in said and "fits" not in said  # no forecast table


@pytest.mark.slow
@pytest.mark.parametrize("case", BROKEN)
def test_validate_refuses_the_config_in_transformers_words(case: str, tiny_model: Path, tmp_path: Path) -> None:
    change, words = BROKEN[case]
    model = _broken_model(tiny_model, tmp_path, change)
    (tmp_path / "d.jsonl").write_text(GOOD * 4)
    profile = tmp_path / "p.toml"
    profile.write_text(f'name = "c"\n[model]\nsource = "{model}"\nmodel_type = "qwen2"\ntemplate = "qwen"\n'
                       '[data]\ntrain = ["./d.jsonl"]\n[training]\nmax_length = 64\n')
    result = h.cli("validate", str(profile))
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert f"error: [model.source] transformers refuses this model's config.json: {words}." in said
    assert f"Fix: Correct {model / 'config.json'} (or pick another model)" in said
    assert "no problems found" not in said
