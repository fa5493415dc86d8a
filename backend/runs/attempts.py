"""OOM retry attempts linked in their run folders (#25 step 3), so the runs list and the scoreboard say them
without the queue file (an entry removed from the queue keeps its runs' links).

`<run>/queue_attempt.json`, written by the keeper (its only writer) when it starts a retry: in the retry's
folder {"attempt": 2, "of_run": <the failed attempt's run id>, "change": "half micro-batch", "note": <what
changed, said in full>}; in the failed attempt's folder "retried_as": [{"run": <the retry's id>, "attempt":
2, "change": ...}]. Read tolerantly: a file that cannot be read is said damaged, never guessed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from backend.core.fs import write_text_atomic
from backend.core.safe_text import visible

LINK_FILE = "queue_attempt.json"


def link_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / LINK_FILE


def change_of(note: str | None) -> str:
    """The change of an OOM retry in a few words (retry.py's note says it in full)."""
    if note and re.search(r"micro-batch \d+ -> \d+", note):
        return "half micro-batch"
    if note and "gradient checkpointing switched on" in note:
        return "gradient checkpointing on"
    return "retried"


def _read(run_dir: str | Path) -> dict[str, Any] | None:
    """The link file's content; None when there is none; {"damaged": why} when it cannot be read."""
    try:
        data = json.loads(link_path(run_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return {"damaged": str(err).splitlines()[0] if str(err) else type(err).__name__}
    return data if isinstance(data, dict) else {"damaged": "not a JSON object"}


def record_retry(run_dir: str, run_id: str, attempt: int, note: str | None, parent_dir: str | None,
                 parent_run: str | None) -> None:
    """Link a started retry and the failed attempt it retries, in both run folders."""
    change = change_of(note)
    write_text_atomic(link_path(run_dir), json.dumps(
        {"attempt": attempt, "of_run": parent_run, "change": change, "note": note}, indent=2))
    if parent_dir and Path(parent_dir).is_dir():
        data = _read(parent_dir)
        data = {} if data is None or "damaged" in data else data
        retried = [r for r in data.get("retried_as", []) if isinstance(r, dict) and r.get("run") != run_id]
        data["retried_as"] = [*retried, {"run": run_id, "attempt": attempt, "change": change}]
        write_text_atomic(link_path(parent_dir), json.dumps(data, indent=2))


def attempt_text(run_dir: str | Path) -> str:
    """The run's link, as the runs list and the scoreboard say it: "attempt 2 of RUN, half micro-batch",
    "retried as RUN2 (attempt 2, half micro-batch)", both, "attempt link damaged: ...", or "" (none)."""
    data = _read(run_dir)
    if data is None:
        return ""
    if "damaged" in data:
        return f"attempt link damaged ({LINK_FILE}: {visible(data['damaged'], limit=80)})"
    parts = []
    if isinstance(data.get("attempt"), int) and data["attempt"] > 1:
        parts.append(f"attempt {data['attempt']} of {visible(data.get('of_run') or 'unknown')}, "
                     f"{visible(data.get('change') or 'retried')}")
    for retry in data.get("retried_as") or []:
        if isinstance(retry, dict):
            parts.append(f"retried as {visible(retry.get('run') or 'unknown')} (attempt {retry.get('attempt')}, "
                         f"{visible(retry.get('change') or 'retried')})")
    return "; ".join(parts)
