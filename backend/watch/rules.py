"""Validation rules of the `[watch]`, `[notify]` and `[debug] inject_nan_steps` keys (#15).

backend.cli.wiring registers WATCH_RULES with backend.launch.validate at CLI and TUI start-up
(validate sits a floor below and never imports this module)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import Problem, Rule
from backend.profile import LaunchProfile

# URL shapes whose path or query is itself the credential
SECRET_URL = re.compile(r"hooks\.slack\.com/services/|discord(?:app)?\.com/api/webhooks/|[?&](?:token|access_token|"
                        r"auth|key|apikey)=|//[^/@\s]+:[^/@\s]+@", re.IGNORECASE)
ENV_REFERENCE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _webhook_secrets(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    url = profile.notify.webhook
    if not url:
        return
    literal = ENV_REFERENCE.sub("", url)
    if SECRET_URL.search(literal):
        yield Problem("notify.webhook", "warning",
                      "the webhook URL holds its secret in the profile, which is copied into every run folder.",
                      "Export it (e.g. export SLACK_WEBHOOK=...) and write webhook = \"${SLACK_WEBHOOK}\".")
    missing = [a or b for a, b in ENV_REFERENCE.findall(url) if (a or b) not in os.environ]
    if missing:
        yield Problem("notify.webhook", "warning",
                      f"the webhook names ${{{missing[0]}}}, which is not set in this environment: alerts "
                      "would not be sent.", f"export {missing[0]}=... before launching.")
    elif not ENV_REFERENCE.sub(lambda m: os.environ[m.group(1) or m.group(2)], url).startswith(("http://", "https://")):
        yield Problem("notify.webhook", "error", f"{url!r} is not an http(s) URL (once its variables are read).",
                      "Write the full URL, e.g. https://ntfy.sh/my-topic.")


def _desktop_needs_notify_send(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.notify.desktop and shutil.which("notify-send") is None:
        yield Problem("notify.desktop", "warning", "notify-send is not installed: no desktop notifications "
                      "(alerts still go to alerts.jsonl and the other sinks).",
                      "Install libnotify-bin, or use a webhook (ntfy works from a phone).")


def _nan_injection_under_fp16(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.debug.inject_nan_steps and profile.precision.fp16:
        yield Problem("debug.inject_nan_steps", "warning",
                      "under fp16 the loss scaler takes a NaN loss for an overflow and skips the step: you will "
                      "see a loss-scale overflow, not a NaN alert.",
                      "Use fp32 or bf16 to see the nonfinite alert, or inject_overflow_steps for overflows.")


def _user_notify_file(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """A broken user-level notify.toml stops every run's watchdog from starting (#29): refused here."""
    from backend.watch.config import notify_file_problem

    problem = notify_file_problem()
    if problem:
        yield Problem("notify", "error", f"{problem}; with it no run would get its watchdog or alerts.",
                      "Fix or remove that file (`workbench validate` reads it again).")


def _rotation_keeps_the_best(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    """transformers' rotation protects the best checkpoint only when an evaluation happened at a save step
    (best_model_checkpoint is checkpoint-<the best evaluation's step>, when that folder exists) (#24)."""
    tr, data = profile.training, profile.data
    if tr.save_total_limit is None or not (data.val or data.split_dataset_ratio):
        return
    save = tr.save_steps or 500
    every = tr.eval_steps or save
    if save % every:
        yield Problem("training.eval_steps", "warning",
                      f"save_total_limit = {tr.save_total_limit} rotates checkpoints away, and evaluations every "
                      f"{every} steps do not fall on the saves every {save}: nothing marks a saved checkpoint as "
                      "the best, so rotation may delete it (it keeps the newest ones).",
                      f"Set eval_steps to {save} (or a divisor of it), or pin checkpoints to keep "
                      "(workbench checkpoints RUN --pin N).")


WATCH_RULES: tuple[Rule, ...] = (_webhook_secrets, _desktop_needs_notify_send, _nan_injection_under_fp16,
                                 _user_notify_file, _rotation_keeps_the_best)
