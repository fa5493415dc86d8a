"""target_modules and report_to are held to what the libraries know (#29): swift's parser takes any string
for both, so a typo (or a smuggled flag) used to pass validate and fail, or be ignored, only in the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import validate
from backend.models.shape_exact import cached_answer, exact_shape
from backend.models.shape_formula import read_config
from backend.profile import LaunchProfile

NO_GPU = HardwareInfo(nvml_error="none")


def _problems(profile: LaunchProfile, field: str) -> list[tuple[str, str, str]]:
    return [(p.severity, p.message, p.fix) for p in validate(profile, NO_GPU, ask_data=True) if p.field == field]


def test_the_shape_answer_names_the_modules_a_target_can_name(tiny_model: Path) -> None:
    exact_shape(tiny_model)
    answer = cached_answer(read_config(tiny_model)[0])
    assert answer is not None
    assert answer["module_paths"] == [
        "lm_head", "model.embed_tokens", "model.layers.*.input_layernorm", "model.layers.*.mlp.down_proj",
        "model.layers.*.mlp.gate_proj", "model.layers.*.mlp.up_proj", "model.layers.*.post_attention_layernorm",
        "model.layers.*.self_attn.k_proj", "model.layers.*.self_attn.o_proj", "model.layers.*.self_attn.q_proj",
        "model.layers.*.self_attn.v_proj", "model.norm"]


def test_an_unknown_target_module_names_the_key_the_name_and_the_closest(tiny_model: Path) -> None:
    exact_shape(tiny_model)  # the shape is known (cached), as after any estimate or launch of this model
    profile = LaunchProfile()
    profile.model.source = str(tiny_model)
    profile.tuner.target_modules = ["all-linear", "all-embedding", "q_proj", "self_attn.v_proj",
                                    "layers.0.mlp.up_proj", "qproj", "attn"]
    assert _problems(profile, "tuner.target_modules") == [
        ("error", "'qproj' is neither a module of this model nor one of swift's keywords (all-embedding, "
                  "all-linear); PEFT would refuse it once the model is loaded.",
         "Closest names: q_proj, v_proj, o_proj, k_proj."),
        ("error", "'attn' is neither a module of this model nor one of swift's keywords (all-embedding, "
                  "all-linear); PEFT would refuse it once the model is loaded.",
         "Use module names of this model: down_proj, embed_tokens, gate_proj, input_layernorm, k_proj, lm_head, "
         "norm, o_proj, post_attention_layernorm, q_proj, up_proj, v_proj.")]


def test_a_model_whose_shape_is_not_known_yet_says_nothing(tiny_model: Path, tmp_path: Path) -> None:
    model = tmp_path / "other"
    model.mkdir()
    config = json.loads((tiny_model / "config.json").read_text())
    config["vocab_size"] = config["vocab_size"] + 8  # another model: no cached shape, and validate asks none
    (model / "config.json").write_text(json.dumps(config))
    profile = LaunchProfile()
    profile.model.source = str(model)
    profile.tuner.target_modules = ["qproj"]
    assert _problems(profile, "tuner.target_modules") == []
    assert cached_answer(config) is None


@pytest.mark.parametrize("trackers", [["tensorbord"], ["none", "wandbb"]])
def test_an_unknown_tracker_names_the_key_and_the_known_ones(trackers: list[str]) -> None:
    profile = LaunchProfile()
    profile.output.report_to = trackers
    found = _problems(profile, "output.report_to")
    assert [(severity, message) for severity, message, _ in found] == [
        ("error", f"{trackers[-1]!r} is not a tracker transformers knows.")]
    fix = found[0][2]
    for known in ("all", "mlflow", "none", "swanlab", "tensorboard", "wandb"):
        assert f" {known}," in fix or fix.endswith(f" {known}.")


def test_known_trackers_pass() -> None:
    profile = LaunchProfile()
    profile.output.report_to = ["tensorboard", "wandb"]
    assert _problems(profile, "output.report_to") == []
