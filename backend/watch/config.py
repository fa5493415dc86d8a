"""The user-level notify defaults, over the profile's `[watch]` and `[notify]` sections.

The section models live in backend.profile.watch_section (re-exported here). A key left out of a
profile's `[notify]` comes from the user-level file `<config dir>/notify.toml` (same keys, no
section header needed), so a webhook set once reaches every run. Secrets never live in either
file: write `${NAME}` and the value is read from the environment when the alert is sent.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from pydantic import ValidationError

from backend.profile.watch_section import ALERT_KINDS, ActionableKind, NotifySection, WatchSection, WebhookFormat

__all__ = ["ALERT_KINDS", "ActionableKind", "NotifySection", "WatchSection", "WebhookFormat", "config_dir",
           "NotifyFileError", "effective_notify", "notify_file_problem", "user_notify_defaults", "user_notify_path"]


class NotifyFileError(ValueError):
    """The user-level notify.toml cannot be read; the message names the file and the line."""


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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return NotifySection()
    except (OSError, UnicodeDecodeError) as err:
        raise NotifyFileError(f"{path}: cannot be read ({err})") from None
    try:
        data = tomllib.loads(text)
        return NotifySection.model_validate(data.get("notify", data))
    except tomllib.TOMLDecodeError as err:  # its message ends '(at line 3, column 9)'
        raise NotifyFileError(f"{path}: not TOML: {err}") from None
    except ValidationError as err:
        raise NotifyFileError(f"{path}{_where(text, err)}: {_first_error(err)}") from None


def notify_file_problem() -> str | None:
    """Why the user-level notify.toml would leave every run without its sinks, or None when it is absent
    or sound: validate refuses a launch on it (a broken file used to turn the watchdog off silently)."""
    try:
        user_notify_defaults()
    except NotifyFileError as err:
        return str(err)
    return None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    return f"{key}: {first['msg']} (got {first.get('input')!r})"


def _where(text: str, err: ValidationError) -> str:
    """' line N' of the first refused key, where the file names it on a line of its own."""
    if not err.errors()[0]["loc"]:
        return ""
    key = re.escape(str(err.errors()[0]["loc"][0]))
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*[\"']?{key}[\"']?\s*=", line):
            return f" line {number}"
    return ""


def effective_notify(profile_notify: NotifySection, defaults: NotifySection | None = None) -> NotifySection:
    """The profile's keys where set, the user's defaults elsewhere."""
    base = defaults if defaults is not None else user_notify_defaults()
    merged = base.model_dump()
    merged.update({k: v for k, v in profile_notify.model_dump().items() if v is not None})
    return NotifySection.model_validate(merged)
