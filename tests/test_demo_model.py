"""The embedded tiny model: built offline, deterministic, accepted by transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backend.core.paths import BUILTIN_DATASETS
from backend.models.demo.build import builtin_model_path, ensure_builtin_model, weights_sha256


@pytest.mark.slow
def test_same_seed_gives_the_same_weights_and_tokenizer(tmp_path: Path, tiny_model: Path) -> None:
    other = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "backend.models.demo.build", "--name", "tiny-qwen2", "--out", str(other)],
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


@pytest.mark.slow
def test_two_concurrent_builds_both_succeed_even_with_a_noisy_stderr(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launches of a profile on the built-in model, at once, on a machine where it is not built yet;
    each build child also writes more to stderr than a pipe holds (64 KiB) before anything else."""
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    noisy = tmp_path / "noisy"
    noisy.mkdir()
    (noisy / "sitecustomize.py").write_text('import sys\nsys.stderr.write("w" * 200_000 + "\\n")\nsys.stderr.flush()\n')
    monkeypatch.setenv("PYTHONPATH", str(noisy))
    results: list[Path | BaseException] = []
    stages: dict[int, list[str]] = {0: [], 1: []}

    def build(number: int) -> None:
        try:
            results.append(ensure_builtin_model("tiny-qwen2", lambda stage, _: stages[number].append(stage)))
        except BaseException as err:  # the loser's failure is the fault under test
            results.append(err)

    builders = [threading.Thread(target=build, args=(number,), daemon=True) for number in range(2)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(240)
    target = builtin_model_path("tiny-qwen2")
    assert results == [target, target]
    assert (target / "config.json").is_file() and (target / "tokenizer.json").is_file()
    assert sorted(p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")) == [target.name]
    # one built it; the other waited and took its folder (one build's CPU, not two)
    assert sorted(len(seen) > 0 for seen in stages.values()) == [False, True]
