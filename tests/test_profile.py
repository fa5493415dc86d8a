"""Profiles: shipped files round-trip exactly, bad files give one clear message each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import LaunchProfile, ProfileError, load_profile, parse_profile, profile_to_toml, save_profile

SHIPPED = sorted(SHIPPED_PROFILES_DIR.glob("*.toml"))
runner = CliRunner()

app = full_app()


def test_there_are_shipped_profiles() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"quickstart", "cpu-ddp-2proc", "cpu-fp16-loss-scale", "qwen2.5-7b-lora-24gb",
            "qwen2-1.5b-fsdp-qlora-2gpu", "llama2-70b-fsdp-qlora-2x24gb", "qwen2.5-7b-full-zero3"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_round_trips_exactly(path: Path, tmp_path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    profile = load_profile(path)
    assert profile_to_toml(profile) == text
    copy = save_profile(profile, tmp_path / path.name)
    assert copy.read_text(encoding="utf-8") == text
    assert load_profile(copy) == profile


def test_only_non_defaults_are_written_but_key_fields_always() -> None:
    text = profile_to_toml(LaunchProfile(name="bare"))
    assert 'source = "builtin:tiny-qwen2"' in text
    assert "lora_rank" not in text  # default


def _problem(text: str) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        parse_profile(text, source="bad.toml")
    return caught.value


def test_unknown_key_names_file_key_and_line() -> None:
    err = _problem('name = "x"\n\n[tuner]\ntype = "lora"\nlora_rnak = 8\n')
    (problem,) = err.problems
    assert (problem.file, problem.key, problem.line) == ("bad.toml", "tuner.lora_rnak", 5)
    assert "unknown key" in problem.message


def test_bad_value_names_allowed_values() -> None:
    (problem,) = _problem('[tuner]\ntype = "lorra"\n').problems
    assert problem.key == "tuner.type" and problem.line == 2
    assert "'lorra'" in problem.message and "'full', 'lora' or 'qlora'" in problem.message


def test_wrong_type_is_reported_with_value() -> None:
    (problem,) = _problem("[training]\nlearning_rate = \"fast\"\n").problems
    assert problem.key == "training.learning_rate" and problem.line == 2
    assert "'fast'" in problem.message


def test_every_problem_is_reported_at_once() -> None:
    err = _problem("[training]\nlearning_rate = -1\nmax_length = 2\n[tuner]\nlora_rank = 0\n")
    assert {p.key for p in err.problems} == {"training.learning_rate", "training.max_length", "tuner.lora_rank"}


def test_bad_toml_gives_line() -> None:
    (problem,) = _problem('name = "x"\n[tuner\n').problems
    assert problem.line == 2 and "not valid TOML" in problem.message


def test_missing_file() -> None:
    with pytest.raises(ProfileError, match="no such file"):
        load_profile("/nonexistent/profile.toml")


def test_atomic_save_keeps_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "p.toml"
    save_profile(LaunchProfile(name="first"), target)
    before = target.read_text()

    def broken_replace(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        save_profile(LaunchProfile(name="second"), target)
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.toml"]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('name = "x"\nbogus = 1\n', "bogus"),
        ('[training]\nlearning_rate = "fast"\n', "training.learning_rate"),
        ("[tuner\n", "not valid TOML"),
        (None, "no such file"),
    ],
    ids=["unknown-key", "wrong-type", "bad-toml", "missing-file"],
)
def test_cli_bad_profile_exits_2_and_changes_nothing(tmp_path: Path, content: str | None, expected: str) -> None:
    profile = tmp_path / "bad.toml"
    if content is not None:
        profile.write_text(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(app, ["show", str(profile), "--run-dir", str(tmp_path / "preview")])
    assert result.exit_code == 2
    assert expected in result.output and "bad.toml" in result.output
    assert result.output.count("error:") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
