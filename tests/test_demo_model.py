"""The embedded tiny model: built offline, deterministic, accepted by transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.demo.build import weights_sha256
from backend.paths import BUILTIN_DATASETS


@pytest.mark.slow
def test_same_seed_gives_the_same_weights_and_tokenizer(tmp_path: Path, tiny_model: Path) -> None:
    other = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "backend.demo.build", "--name", "tiny-qwen2", "--out", str(other)],
                   check=True, capture_output=True)
    assert weights_sha256(other) == weights_sha256(tiny_model)
    assert (other / "tokenizer.json").read_text() == (tiny_model / "tokenizer.json").read_text()


def test_tiny_model_is_a_real_qwen2_with_chat_template(tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    tokenizer = json.loads((tiny_model / "tokenizer_config.json").read_text())
    assert tokenizer["eos_token"] == "<|im_end|>"
    template = (tiny_model / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template


def test_shipped_dataset_is_well_formed() -> None:
    rows = [json.loads(line) for line in BUILTIN_DATASETS["self-cognition"].read_text().splitlines()]
    assert 50 <= len(rows) <= 100
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles[-1] == "assistant" and "user" in roles
        assert all(m["content"].strip() for m in row["messages"])
    assert all("Quill" in row["messages"][-1]["content"] for row in rows)
