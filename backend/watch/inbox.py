"""What the user has not seen yet, across all runs, and the one-line status for tmux / a prompt.

Light on purpose: `workbench status --line` runs every few seconds from tmux's status bar, so this
module uses the stdlib, backend.core and backend.rundir.index only (no pydantic, no psutil; backend.contract.events and
its msgspec only when a run is active). It finds run folders as `backend.rundir.index.known_folders`
does (the index file and the workspace; a test checks they agree) and reads state.json, the tail of
events.jsonl (typed events) and alerts.jsonl.

Seen marks live in `<data dir>/inbox_seen.json`: per run folder, the byte offset of alerts.jsonl
up to which the user has looked (alerts.jsonl is append-only, so an offset is exact).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.contract.alert_line import alert_of, damaged_text
from backend.core.fs import write_text_atomic
from backend.core.paths import data_dir
from backend.core.safe_text import visible
from backend.core.tail import Tail
from backend.core.units import duration
from backend.rundir import index

if TYPE_CHECKING:
    from backend.contract.events import Log

ACTIVE = ("starting", "running", "stopping")
SEEN_FILE = "inbox_seen.json"


def run_folders() -> list[Path]:
    """Every run folder with a state.json: the index's and the workspace's (strings and os.path:
    pathlib's resolve costs more than the rest of the status line)."""
    seen = dict.fromkeys([*index.indexed_paths()[0], *index.workspace_paths()])
    return [Path(path) for path in seen if os.path.isfile(os.path.join(path, "state.json"))]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def last_log(run_dir: Path, tail_bytes: int = 16_384) -> Log | None:
    """The newest rank-0 `log` event, from the file's tail only (damaged lines skipped)."""
    from backend.contract.events import EventReader, Log  # msgspec: only when a run is active

    events = EventReader.from_end(run_dir / "events.jsonl", tail_bytes).read_new()
    return next((e for e in reversed(events) if isinstance(e, Log) and e.rank == 0), None)


# ---------------------------------------------------------------- seen marks


def seen_path() -> Path:
    return data_dir() / SEEN_FILE


def load_seen() -> dict[str, int]:
    """The marks; one that is not a byte offset (negative, not a whole number) is left out: unseen from 0."""
    data = read_json(seen_path()) or {}
    return {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def save_seen(marks: dict[str, int]) -> None:
    path = seen_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(marks, indent=1))


class InboxItem:
    """One unseen alert of one run, or its damaged lines (`damaged`: what to say; `alert` then empty).
    A plain class: dataclasses costs the status line 20 ms."""

    def __init__(self, run_dir: Path, alert: dict[str, Any], damaged: str | None = None):
        self.run_dir, self.alert, self.damaged = run_dir, alert, damaged

    @property
    def line(self) -> str:
        if self.damaged is not None:
            return self.damaged
        a = self.alert
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(a["time"]))
        where = f" at step {a['step']}" if a.get("step") is not None else ""
        return visible(f"{when}  {self.run_dir.name} {a.get('kind')}{where}: {a.get('message')}")


def unseen(marks: dict[str, int] | None = None, include_seen: bool = False) -> tuple[list[InboxItem], dict[str, int]]:
    """Alerts not yet seen, oldest first, and the marks that would make them seen."""
    marks = dict(load_seen() if marks is None else marks)
    items: list[InboxItem] = []
    new_marks = dict(marks)
    for folder in run_folders():
        path = folder / "alerts.jsonl"
        key = str(folder)
        try:
            size = path.stat().st_size
        except OSError:
            continue
        start = 0 if include_seen else marks.get(key, 0)
        if size <= start:
            continue
        tail = Tail(path, start)
        found = [alert_of(raw) for raw in tail.read_all_lines()]
        new_marks[key] = tail.offset
        items += [InboxItem(folder, alert) for alert in found if isinstance(alert, dict)]
        if damaged := [why for why in found if isinstance(why, str)]:
            items.append(InboxItem(folder, {}, damaged_text(folder, len(damaged), damaged[0])))
    items.sort(key=lambda item: item.alert.get("time", 0))  # damaged lines first
    return items, new_marks


def unseen_count(marks: dict[str, int], folders: list[Path] | None = None) -> tuple[int, str | None, int]:
    """How many alerts are unseen, the kind of the newest, and how many unseen lines are damaged (sizes
    first: cheap when nothing is new)."""
    count, newest, newest_kind, damaged = 0, 0.0, None, 0
    for folder in run_folders() if folders is None else folders:
        try:
            size = (folder / "alerts.jsonl").stat().st_size
        except OSError:
            continue
        if size <= marks.get(str(folder), 0):
            continue
        for raw in Tail(folder / "alerts.jsonl", marks.get(str(folder), 0)).read_all_lines():
            alert = alert_of(raw)
            if isinstance(alert, str):
                damaged += 1
            elif alert is not None:
                count += 1
                if alert["time"] >= newest:
                    newest, newest_kind = alert["time"], alert["kind"]
    return count, newest_kind, damaged


# ---------------------------------------------------------------- the status line


def _supervisor_gone(folder: Path, state: dict[str, Any]) -> bool:
    """True only when its supervisor is proven gone (pid + start time + marker, or an earlier boot of
    this host: backend.rundir.process, imported only when a run says it is active)."""
    from backend.core.process_identity import keeper_gone, run_marker

    host, boot = state.get("host"), state.get("boot_id")
    return keeper_gone(run_marker(folder), host if isinstance(host, str) else None,
                       boot if isinstance(boot, str) else None, state.get("supervisor_pid"),
                       state.get("supervisor_started"))


_STATE_TYPES = {"profile_name": (str,), "created_at": (int, float), "supervisor_pid": (int,),
                "supervisor_started": (int, float), "host": (str,), "boot_id": (str,)}


def state_misfit(state: dict[str, Any]) -> str | None:
    """Why an active state.json cannot be shown as a run (`workbench runs` says it the same way), or None."""
    for name, kinds in _STATE_TYPES.items():
        value = state.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            return f"field {name}"
    return None


def run_part(folder: Path, state: dict[str, Any]) -> str:
    if state_misfit(state) is not None:
        return f"{visible(folder.name, limit=40)} damaged"
    name = visible(state.get("profile_name") or folder.name, limit=40)
    if _supervisor_gone(folder, state):
        return f"{name} ?"  # says running, but its supervisor is gone: `workbench runs` reconciles it
    event = last_log(folder)
    if event is None:
        return f"{name} {state.get('status', 'starting')}"
    step, total = event.step, event.max_steps
    part = f"{name} {step}/{total}" if total else f"{name} {step}"
    if event.loss is not None:
        part += f" loss {event.loss:.3g}"
    speed = event.steps_per_second
    if total and speed and step is not None and total > step:
        part += f" eta {duration((total - step) / speed, short=True)}"
    return part


def status_line(max_runs: int = 2) -> str:
    """"quickstart 120/400 loss 1.23 eta 2m10s | ! 2 new (hang)"; empty when nothing runs and all is seen."""
    parts = []
    active = []
    folders = run_folders()
    for folder in folders:
        state = read_json(folder / "state.json")
        if state and state.get("status") in ACTIVE:
            created = state.get("created_at")
            active.append((created if state_misfit(state) is None and created else 0, folder, state))
    active.sort(key=lambda item: item[0], reverse=True)
    parts += [run_part(folder, state) for _, folder, state in active[:max_runs]]
    if len(active) > max_runs:
        parts.append(f"+{len(active) - max_runs} more")
    count, kind, damaged = unseen_count(load_seen(), folders)
    if count:
        parts.append(f"! {count} new ({visible(kind, limit=20)})")
    if damaged:
        parts.append(f"! {damaged} damaged alert line{'s' * (damaged > 1)}")
    return " | ".join(parts)


def main(args: list[str] | None = None) -> int:
    """`workbench status --line`."""
    try:
        line = status_line()
    except Exception as err:  # a status bar shows a short error, never a traceback
        line = f"workbench: {type(err).__name__}"
    print(line)
    return 0
