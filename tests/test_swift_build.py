"""`workbench validate` has swift build the run's own arguments (#35): what swift would raise in the first
minute of the run (a model type or template it cannot infer, a library a flag needs) is an error before
launch, naming the profile key and the fix. Swift runs in a child (about 10 s, cached)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.faults import helpers as h

GOOD = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


def _copied_model(tiny_model: Path, folder: Path) -> Path:
    """The tiny Qwen2 as a user's own folder: config.json says Qwen2ForCausalLM, which swift's qwen2 and
    qwen2_gte both claim; the workbench's built-in mark is not copied."""
    model = folder / "my-model"
    shutil.copytree(tiny_model, model, ignore=shutil.ignore_patterns("workbench_builtin.json"))
    return model


def _profile(folder: Path, model: Path, model_lines: str = "", extra: str = "") -> Path:
    (folder / "d.jsonl").write_text(GOOD * 4)
    profile = folder / "p.toml"
    profile.write_text(f'name = "b"\n[model]\nsource = "{model}"\n{model_lines}[data]\ntrain = ["./d.jsonl"]\n'
                       f'[training]\nmax_length = 64\n{extra}')
    return profile


@pytest.mark.slow
def test_a_model_swift_cannot_match_is_refused_with_the_type_and_template_to_set(tiny_model: Path,
                                                                                 tmp_path: Path) -> None:
    profile = _profile(tmp_path, _copied_model(tiny_model, tmp_path))
    result = h.cli("validate", str(profile))
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert ("error: [model.model_type] swift cannot infer the model_type of this model: it sees [qwen2, qwen2_gte] "
            "and stops at launch") in said
    assert "Fix: Set model_type = \"qwen2\" in [model] (config.json's model_type), or another of [qwen2, qwen2_gte]." \
        in said
    assert "error: [model.template] swift cannot infer the template of this model: it sees [qwen, qwen2_5," in said
    assert "Fix: Set template = \"qwen\" in [model]" in said
    assert "no problems found" not in said


@pytest.mark.slow
def test_a_flag_whose_library_is_missing_is_refused_with_the_package_to_install(tiny_model: Path,
                                                                               tmp_path: Path) -> None:
    profile = _profile(tmp_path, _copied_model(tiny_model, tmp_path), 'model_type = "qwen2"\ntemplate = "qwen"\n',
                       "[extra_swift_args]\nuse_liger_kernel = true\n")
    result = h.cli("validate", str(profile))
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert ("error: [extra_swift_args.use_liger_kernel] swift needs a library that is not installed: "
            "use_liger_kernel requires liger_kernels, try `pip install liger-kernel`.") in said
    assert "Fix: pip install liger-kernel into the workbench's environment" in said


@pytest.mark.slow
def test_the_first_validate_says_it_asks_swift_and_the_next_one_is_quiet(tiny_model: Path, tmp_path: Path) -> None:
    profile = _profile(tmp_path, _copied_model(tiny_model, tmp_path), 'model_type = "qwen2"\ntemplate = "qwen"\n')
    first = h.cli("validate", str(profile))
    said = " ".join(first.output.split())
    assert first.exit_code == 0, said
    assert "workbench: asking swift to build the run's arguments (no weights loaded; once per swift version and " \
           "profile)..." in said
    assert "no problems found" in said
    again = " ".join(h.cli("validate", str(profile)).output.split())
    assert "asking swift to build" not in again and "no problems found" in again
