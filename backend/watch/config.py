"""The user-level notify defaults, over the profile's `[watch]` and `[notify]` sections.

The section models live in backend.profile_watch (re-exported here). A key left out of a
profile's `[notify]` comes from the user-level file `<config dir>/notify.toml` (same keys, no
section header needed), so a webhook set once reaches every run. Secrets never live in either
file: write `${NAME}` and the value is read from the environment when the alert is sent.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from backend.profile_watch import ALERT_KINDS, ActionableKind, NotifySection, WatchSection, WebhookFormat

__all__ = ["ALERT_KINDS", "ActionableKind", "NotifySection", "WatchSection", "WebhookFormat", "config_dir",
           "effective_notify", "user_notify_defaults", "user_notify_path"]


def config_dir() -> Path:
    """User configuration; WORKBENCH_CONFIG_DIR overrides it."""
    override = os.environ.get("WORKBENCH_CONFIG_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_config_dir("finetune-workbench"))


def user_notify_path() -> Path:
    return config_dir() / "notify.toml"


def user_notify_defaults() -> NotifySection:
    """The user-level notify.toml (keys at the top level or under [notify]); empty when absent."""
    path = user_notify_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NotifySection()
    return NotifySection.model_validate(data.get("notify", data))


def effective_notify(profile_notify: NotifySection, defaults: NotifySection | None = None) -> NotifySection:
    """The profile's keys where set, the user's defaults elsewhere."""
    base = defaults if defaults is not None else user_notify_defaults()
    merged = base.model_dump()
    merged.update({k: v for k, v in profile_notify.model_dump().items() if v is not None})
    return NotifySection.model_validate(merged)
