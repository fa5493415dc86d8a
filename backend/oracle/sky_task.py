"""Question `sky_task`: SkyPilot's own reading of a task YAML (#40 item 1).

`workbench export skypilot` writes a task YAML; whether SkyPilot accepts it, and what it makes of it,
is SkyPilot's to say: the child parses the text with `sky.Task.from_yaml_config` (the schema check and
every field's own checks, as `sky launch` does before it asks any cloud) and answers the task as
SkyPilot writes it back (`Task.to_yaml_config`): its resources, nodes, mounts, secrets' names. No cloud
is asked, no credential read. Cached by skypilot's version and the YAML text.

Parent side: `check_task` (raises SkyTaskRefused with SkyPilot's words, SkyPilotMissing without it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

QUESTION = "sky_task"
LIBRARIES = ("skypilot",)
INSTALL = 'pip install -e ".[cloud]"'


class SkyPilotMissing(RuntimeError):
    """skypilot is not installed in the workbench's environment."""


class SkyTaskRefused(ValueError):
    """SkyPilot's parser refused the task (the message is SkyPilot's)."""


def check_task(text: str, *, timeout: float = 120) -> dict[str, Any]:
    """SkyPilot's reading of the task YAML `text`: {"ok": True, "task": {...}}. SkyTaskRefused with SkyPilot's
    message when it refuses it; SkyPilotMissing when skypilot is not installed; OracleError when the child
    fails otherwise."""
    from backend.oracle import ask, library_versions

    if library_versions(LIBRARIES)["skypilot"] == "missing":
        raise SkyPilotMissing(f"skypilot is not installed, so SkyPilot cannot check the task; install it with "
                              f"`{INSTALL}` (or `pip install \"skypilot[aws]\"` etc. for your cloud)")
    found = ask(QUESTION, {"yaml": text}, libraries=LIBRARIES, timeout=timeout)
    if not found.get("ok"):
        raise SkyTaskRefused(str(found.get("error", "SkyPilot refused the task")))
    return found


# ---------------------------------------------------------------- child side


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("asking SkyPilot's task parser")
    import yaml
    from sky import Task  # type: ignore[import-untyped, unused-ignore]

    config = yaml.safe_load(payload["yaml"])
    try:
        task = Task.from_yaml_config(config)
    except Exception as err:  # noqa: BLE001 - SkyPilot's refusal, in its words, is the answer
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    written = task.to_yaml_config()
    written.pop("_user_specified_yaml", None)
    return {"ok": True, "task": _plain(written)}


def _plain(value: Any) -> Any:
    """JSON-safe: SkyPilot writes sets and tuples in places."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
