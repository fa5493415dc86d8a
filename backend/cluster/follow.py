"""A run folder that reaches here from elsewhere (#40 item 3): a SLURM run's folder on the shared filesystem,
or a SkyPilot run's folder in its bucket, copied into the run's local folder by `workbench sync`.

The runs list, `workbench status` and the monitor read such a folder as they read a local one; what they
add is how old what they see is: "events as of 12 s ago" (the newest event's own time), and for a synced
copy when and from where it was copied (sync.json).

`sync_from` copies the files the readers read (state, events, log, alerts, forecast, world), each whole
and atomically (a reader never sees half a file), never through a link, from a folder the caller proved
to be the same run's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from backend.contract.alerts import ALERTS_FILE_NAME
from backend.contract.events import EventReader
from backend.core.fs import write_bytes_atomic
from backend.core.safe_text import visible

SYNC_FILE_NAME = "sync.json"
SYNCED = ("state.json", "events.jsonl", "output.log", ALERTS_FILE_NAME, "forecast.json", "world.json")
TAIL_BYTES = 65_536


def sync_from(source: Path, mirror: Path) -> list[str]:
    """Copy the run's readable files from `source` into `mirror`; the names copied. Links and anything that is
    not a plain file are skipped (said in the list as "NAME (not a file: skipped)")."""
    copied = []
    for name in SYNCED:
        path = Path(source) / name
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_file():
            copied.append(f"{name} (not a file: skipped)")
            continue
        write_bytes_atomic(Path(mirror) / name, path.read_bytes())
        copied.append(name)
    record = {"source": str(source), "synced_at": time.time(), "files": copied}
    write_bytes_atomic(Path(mirror) / SYNC_FILE_NAME, json.dumps(record, indent=2).encode())
    return copied


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def last_event_time(events: Path) -> float | None:
    found = [e.time for e in EventReader.from_end(events, TAIL_BYTES).read_new() if e.time > 0]
    return max(found) if found else None


def seen_line(folder: Path, *, elsewhere: str | None, now: float | None = None) -> str | None:
    """How old what is seen of a run from elsewhere is; None for a run of this machine that was never synced."""
    now = time.time() if now is None else now
    synced = _synced(folder)
    if synced is None and elsewhere is None:
        return None
    newest = last_event_time(Path(folder) / "events.jsonl")
    parts = [f"events as of {_ago(now - newest)}" if newest is not None else "no events yet"]
    if synced is not None:
        source, at = synced
        parts.append(f"synced {_ago(now - at)} from {visible(source, 200)} (`workbench sync` copies it again)")
    else:
        parts.append("read through the folder the run writes (a shared filesystem)")
    return "; ".join(parts)


def _synced(folder: Path) -> tuple[str, float] | None:
    try:
        record = json.loads((Path(folder) / SYNC_FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    source, at = record.get("source"), record.get("synced_at")
    if not isinstance(source, str) or not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    return source, float(at)
