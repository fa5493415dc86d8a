"""A broken user-level notify.toml is refused by validate and by launch, naming the file and line (#29).

It used to turn every run's watchdog off silently: no alerts, no finished alert, a line in watch.log."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import validate
from backend.profile import LaunchProfile
from backend.runs.errors import LaunchRefused
from backend.runs.start import start_run
from tests.faults.helpers import cli

NO_GPU = HardwareInfo(nvml_error="none")


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "config").mkdir()
    return tmp_path / "config"


def _notify_errors(profile: LaunchProfile) -> list[str]:
    return [p.message for p in validate(profile, NO_GPU) if p.field == "notify" and p.severity == "error"]


def test_a_notify_toml_that_is_not_toml_is_an_error_with_its_line(config_dir: Path) -> None:
    file = config_dir / "notify.toml"
    file.write_text('bell = true\nwebhook = "https://ntfy.sh/x\n')
    assert _notify_errors(LaunchProfile()) == [
        f"{file}: not TOML: Illegal character '\\n' (at line 2, column 29); with it no run would get its "
        "watchdog or alerts."]


def test_a_wrong_value_in_notify_toml_names_the_key_and_its_line(config_dir: Path) -> None:
    file = config_dir / "notify.toml"
    file.write_text('[notify]\nbell = true\nwebhook_retries = 99\n')
    assert _notify_errors(LaunchProfile()) == [
        f"{file} line 3: webhook_retries: Input should be less than or equal to 10 (got 99); with it no run "
        "would get its watchdog or alerts."]


def test_an_absent_or_sound_notify_toml_says_nothing(config_dir: Path) -> None:
    assert _notify_errors(LaunchProfile()) == []
    (config_dir / "notify.toml").write_text('bell = true\nwebhook_retries = 2\n')
    assert _notify_errors(LaunchProfile()) == []


def test_launch_and_the_validate_command_refuse_it(config_dir: Path, isolated_runs: Path, tmp_path: Path) -> None:
    file = config_dir / "notify.toml"
    file.write_text('bell = "loud"\n')
    with pytest.raises(LaunchRefused) as refused:
        start_run(LaunchProfile(), hardware=NO_GPU)
    assert [p.field for p in refused.value.problems] == ["notify"]
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())  # no run folder was made
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\n')
    result = cli("validate", str(profile))
    assert result.exit_code == 1
    assert f"{file} line 1: bell: Input should be a valid boolean" in " ".join(result.output.split())
