"""Issue #29, High 1 (and the Low item on template/model_type/model_author): no value of a profile key
reaches swift's parser as a flag of its own. `target_modules = ["all-linear", "--tuner_type=full"]`
trained a full fine-tune under a LoRA profile; `--hub_token=...` in a list put a secret on the command
line. validate names the key; the builder refuses to build such a line; `show` says why, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.launch.command import FlagLikeValue, build_launch
from backend.launch.validate import errors, validate
from backend.profile import load_profile, save_profile
from tests.fakes import CPU_BOX
from tests.timing import scaled

QUICKSTART = SHIPPED_PROFILES_DIR / "quickstart.toml"

CASES = [
    ("tuner", "target_modules", ["all-linear", "--tuner_type=full"], "tuner.target_modules", "--tuner_type=full"),
    ("tuner", "target_modules", ["all-linear", "--hub_token=hf_secret"], "tuner.target_modules",
     "--hub_token=***"),  # a secret's value is never echoed (#34 low item)
    ("output", "report_to", ["none", "--model_author=x"], "output.report_to", "--model_author=x"),
    ("model", "template", "-x", "model.template", "-x"),
    ("model", "model_type", "--help", "model.model_type", "--help"),
    ("model", "model_author", "--hub_token=hf_secret", "model.model_author", "--hub_token=***"),
]


def _profile(section: str, key: str, value: object):  # noqa: ANN202
    profile = load_profile(QUICKSTART)
    setattr(getattr(profile, section), key, value)
    return profile


@pytest.mark.parametrize("section, key, value, field, dashed", CASES)
def test_validate_names_the_key_of_a_flag_like_value(section: str, key: str, value: object, field: str,
                                                    dashed: str) -> None:
    problems = errors(validate(_profile(section, key, value), CPU_BOX, base_dir=SHIPPED_PROFILES_DIR))
    mine = [p for p in problems if p.field == field]
    assert [p.message for p in mine] == [
        f"{dashed!r} begins with '-': swift's parser would read it as a flag of its own, not as a value of "
        f"--{key}."]


@pytest.mark.parametrize("section, key, value, field, dashed", CASES)
def test_the_builder_refuses_to_put_a_flag_like_value_on_the_line(section: str, key: str, value: object, field: str,
                                                                  dashed: str, tmp_path: Path) -> None:
    with pytest.raises(FlagLikeValue) as raised:
        build_launch(_profile(section, key, value), tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR)
    assert str(raised.value).startswith(f"[{field}] value {dashed!r} begins with '-'")


def test_a_list_in_extra_swift_args_is_held_to_the_same_rule(tmp_path: Path) -> None:
    profile = load_profile(QUICKSTART)
    profile.extra_swift_args = {"modules_to_save": ["embed_tokens", "--tuner_type=full"]}
    with pytest.raises(FlagLikeValue, match=r"^\[extra_swift_args.modules_to_save\] value '--tuner_type=full'"):
        build_launch(profile, tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR)


def test_negative_numbers_and_a_dashed_system_prompt_stay_values(tmp_path: Path) -> None:
    profile = load_profile(QUICKSTART)
    profile.training.max_steps = -1  # argparse reads "-1" as a value
    profile.model.system = "--be brief"  # passed as --system=..., so it cannot become a flag
    plan = build_launch(profile, tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR)
    assert "--system=--be brief" in plan.argv
    assert plan.argv[plan.argv.index("--max_steps") + 1] == "-1"
    assert not [p for p in validate(profile, CPU_BOX, base_dir=SHIPPED_PROFILES_DIR) if "begins with '-'" in p.message]


def test_validate_masks_every_smuggled_secret_in_its_errors(tmp_path: Path) -> None:
    profile = load_profile(QUICKSTART)
    profile.model.model_author = "--hub_token=hf_abcdefghijklmnop"
    profile.tuner.target_modules = ["all-linear", "--api_key=sk-1234567890abcdef"]
    profile.extra_swift_args = {"hub_token": "-hf_zzzzzzzzzzzz", "modules_to_save": ["--swanlab_token=abcdefgh"]}
    path = save_profile(profile, tmp_path / "p.toml")
    done = subprocess.run([sys.executable, "-m", "backend.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=scaled(300))
    said = [line for line in done.stdout.splitlines() if "begins with '-'" in line]
    assert [line.split(" begins")[0] for line in said] == [
        "error: [extra_swift_args.hub_token] value '***'",
        "error: [extra_swift_args.modules_to_save] value '--swanlab_token=***'",
        "error: [model.model_author] '--hub_token=***'",
        "error: [tuner.target_modules] '--api_key=***'"]
    for secret in ("hf_abcdefghijklmnop", "sk-1234567890abcdef", "hf_zzzzzzzzzzzz", "abcdefgh"):
        assert secret not in done.stdout + done.stderr


def test_a_refused_value_of_the_profile_file_is_masked_too(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n[training]\nmax_steps = "--hub_token=hf_abcdefghijklmn"\n')
    done = subprocess.run([sys.executable, "-m", "backend.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=scaled(120))
    assert (done.stdout + done.stderr).strip().splitlines()[-1] == (
        f"error: {path}:3: [training.max_steps] '--hub_token=***': Input should be a valid integer, unable to parse "
        "string as an integer")


def test_show_says_why_instead_of_printing_the_smuggled_line(tmp_path: Path) -> None:
    path = save_profile(_profile("tuner", "target_modules", ["all-linear", "--tuner_type=full"]), tmp_path / "p.toml")
    done = subprocess.run([sys.executable, "-m", "backend.cli", "show", str(path), "--run-dir", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "--tuner_type=full" not in done.stdout
    assert "error: [tuner.target_modules] value '--tuner_type=full' begins with '-'" in done.stderr
