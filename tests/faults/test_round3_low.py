"""Issue #29, Low: each a clear message instead of a traceback or a wrong answer. `show --json/--explain`
printed a `hub_token` given in extra args; `estimate quickstart` said "no such file" although every other
command takes a shipped profile's name; a 100k-deep config.json and `--gpu-memory inf` ended in
RecursionError / OverflowError tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.profile import load_profile, save_profile
from tests.timing import scaled


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], capture_output=True, text=True,
                          timeout=scaled(timeout))


def test_show_never_prints_a_hub_token_given_in_extra_args(tmp_path: Path) -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.extra_swift_args = {"hub_token": "ms_very_secret"}
    path = save_profile(profile, tmp_path / "p.toml")
    for extra in ([], ["--json"], ["--explain"]):
        done = _cli("show", str(path), "--run-dir", str(tmp_path / "run"), *extra)
        assert "ms_very_secret" not in done.stdout + done.stderr, extra
        assert "--hub_token=***" in done.stdout, (extra, done.stdout[-500:])
    argv = json.loads(_cli("show", str(path), "--run-dir", str(tmp_path / "run"), "--json").stdout)["argv"]
    assert argv[-1] == "--hub_token=***"


def test_estimate_takes_a_shipped_profiles_name() -> None:
    done = _cli("estimate", "quickstart", "--formula", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["request"]["tuner"] == "lora"


@pytest.mark.parametrize("option", ["--gpu-memory", "--host-memory"])
def test_estimate_refuses_an_infinite_memory_size(option: str) -> None:
    done = _cli("estimate", "quickstart", "--formula", option, "inf")
    assert (done.returncode, done.stderr) == (2, f"workbench estimate: {option} inf: give a finite number of GiB\n")


def test_estimate_of_a_config_nested_past_the_recursion_limit_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = _cli("estimate", "--model", str(tmp_path), "--formula")
    assert (done.returncode, done.stderr) == (2, "workbench estimate: config.json is nested too deep to be a model "
                                                 "config\n")


def test_export_torchrun_never_writes_a_secrets_value(tmp_path: Path) -> None:
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.env = {"HF_TOKEN": ""}
    path = save_profile(profile, tmp_path / "p.toml")
    done = subprocess.run([sys.executable, "-m", "backend.cli", "export", "torchrun", str(path), "--run-dir",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=scaled(180),
                          env={**os.environ, "HF_TOKEN": "hf_very_secret"})
    assert done.returncode == 0, done.stderr
    assert "hf_very_secret" not in done.stdout and 'export HF_TOKEN="$HF_TOKEN"' in done.stdout


def test_a_folder_dataset_with_no_data_file_is_named_not_a_functools_partial(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("notes")
    done = _cli("data", "inspect", str(tmp_path / "empty"))
    assert done.returncode == 2 and "functools.partial" not in done.stdout + done.stderr
    assert done.stderr == f"error: {tmp_path / 'empty'} holds no dataset file (.jsonl, .json, .csv, .txt, .parquet)\n"
