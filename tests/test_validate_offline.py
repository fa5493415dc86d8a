"""`workbench validate` on hub ids with no local copy (#35): a warning saying swift downloads them at launch, an
error when the machine is offline (an offline variable, or the hub not answering a short probe). And a learning
rate no optimizer trains with is an error with the range."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.launch.validate import hub
from tests.faults import helpers as h

HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
HUB_DATA = "AI-ModelScope/alpaca-gpt4-data-en"


@pytest.fixture
def hub_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in hub.OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # empty caches: nothing is local
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    profile = tmp_path / "p.toml"
    profile.write_text(f'name = "hub"\n[model]\nsource = "{HUB_MODEL}"\n[data]\ntrain = ["{HUB_DATA}"]\n')
    return profile


def _said(profile: Path) -> tuple[int, str]:
    result = h.cli("validate", str(profile))
    return result.exit_code, " ".join(result.output.split())


def test_an_offline_variable_makes_a_hub_id_with_no_local_copy_an_error(hub_profile: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, said = _said(hub_profile)
    assert code == 1, said
    assert (f"error: [model.source] '{HUB_MODEL}' is a hub id with no local copy (neither a folder nor in the Hugging "
            "Face or ModelScope cache): swift downloads the whole model (weights and tokenizer) from "
            "www.modelscope.cn at launch, and this machine is offline (HF_HUB_OFFLINE is set).") in said
    assert f"error: [data.train] '{HUB_DATA}' is a hub id with no local copy" in said
    assert "no problems found" not in said


def test_a_hub_that_does_not_answer_makes_it_an_error(hub_profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "hub_reachable", lambda host: False)
    code, said = _said(hub_profile)
    assert code == 1, said
    assert "and this machine is offline (www.modelscope.cn did not answer within 3 s)." in said


def test_online_it_is_a_warning_that_says_what_is_downloaded(hub_profile: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "hub_reachable", lambda host: True)
    code, said = _said(hub_profile)
    assert (f"warning: [model.source] '{HUB_MODEL}' is a hub id with no local copy (neither a folder nor in the "
            "Hugging Face or ModelScope cache): swift downloads the whole model (weights and tokenizer) from "
            "www.modelscope.cn at launch.") in said
    assert f"warning: [data.train] '{HUB_DATA}' is a hub id with no local copy" in said
    assert "no problems found" not in said


def test_a_learning_rate_above_one_is_an_error_with_the_range(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('name = "lr"\n[training]\nlearning_rate = 1e30\n')
    code, said = _said(profile)
    assert code == 1, said
    assert ("error: [training.learning_rate] learning_rate 1e+30 is outside any sane range (0 < learning_rate <= 1): "
            "the loss would diverge from the first step.") in said
