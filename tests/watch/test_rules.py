"""Validation of the [notify] and [debug] inject_nan_steps keys: secrets stay out of files."""

from __future__ import annotations

import pytest

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import validate
from backend.profile import LaunchProfile

NO_GPU = HardwareInfo(nvml_error="none")


def _problems(profile: LaunchProfile, prefix: str) -> list[tuple[str, str, str]]:
    return [(p.field, p.severity, p.message) for p in validate(profile, NO_GPU) if p.field.startswith(prefix)]


@pytest.mark.parametrize("url", ["https://hooks.slack.com/services/T000/B000/XXXX",
                                 "https://discord.com/api/webhooks/123/abc",
                                 "https://ntfy.example/alerts?token=tk_123",
                                 "https://user:pass@hooks.example/x"])
def test_a_webhook_with_its_secret_inline_is_warned(url: str) -> None:
    profile = LaunchProfile()
    profile.notify.webhook = url
    assert _problems(profile, "notify.webhook") == [
        ("notify.webhook", "warning",
         "the webhook URL holds its secret in the profile, which is copied into every run folder.")]


def test_env_references_are_the_way_and_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = LaunchProfile()
    profile.notify.webhook = "${WB_TEST_SLACK}"
    monkeypatch.delenv("WB_TEST_SLACK", raising=False)
    assert _problems(profile, "notify.webhook") == [
        ("notify.webhook", "warning", "the webhook names ${WB_TEST_SLACK}, which is not set in this environment: "
                                      "alerts would not be sent.")]
    monkeypatch.setenv("WB_TEST_SLACK", "https://hooks.slack.com/services/T/B/secret")
    assert _problems(profile, "notify.webhook") == []
    profile.notify.webhook = "ntfy.sh/topic"
    assert [p[1] for p in _problems(profile, "notify.webhook")] == ["error"]


def test_nan_injection_under_fp16_says_what_will_happen() -> None:
    profile = LaunchProfile()
    profile.debug.inject_nan_steps = [5]
    assert _problems(profile, "debug.inject_nan_steps") == []
    profile.precision.fp16 = True
    assert [p[1] for p in _problems(profile, "debug.inject_nan_steps")] == ["warning"]
