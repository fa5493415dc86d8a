"""`<run>/alerts.jsonl`: what the watchdog raised, one JSON object a line, append-only.

Every line: `v`, `id` (unique in the run), `kind` (see config.ALERT_KINDS), `step` (last step seen,
or null), `time` (unix seconds), `message` (one line for a person), `evidence` (the numbers that
show it), `action` (`alert` or `stop`). Written with one `write` on an O_APPEND descriptor, like
events.jsonl, and read with the one incremental reader (backend.core.tail). Stdlib only: the status line
reads it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.contract.alert_line import alert_of
from backend.core.safe_text import visible
from backend.core.tail import Tail

ALERTS_FILE_NAME = "alerts.jsonl"
ALERTS_VERSION = 1
FINAL_KINDS = ("finished", "stopped", "failed")  # the kinds of the alert that says how a run ended


def final_kind(status: str) -> str:
    """The final alert's kind for a run's status: an ending that is not a known one (`unknown`) is
    raised as `failed`, its message then saying the status as it is."""
    return status if status in FINAL_KINDS else "failed"


@dataclass
class Alert:
    kind: str
    message: str
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    action: str = "alert"
    time: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: secrets.token_hex(6))
    run_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"v": ALERTS_VERSION, "type": "alert", **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Alert:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def line(self) -> str:
        """"run X failed at step 812: CUDA out of memory" (control characters shown as escapes)"""
        where = f" at step {self.step}" if self.step is not None else ""
        return visible(f"{self.run_id or 'run'} {self.kind}{where}: {self.message}")


def alerts_path(run_dir: Path) -> Path:
    return Path(run_dir) / ALERTS_FILE_NAME


def append_alert(run_dir: Path, alert: Alert) -> None:
    line = json.dumps(alert.to_json(), separators=(",", ":"), default=str) + "\n"
    fd = os.open(alerts_path(run_dir), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def append_alert_once(run_dir: Path, token: str, alert: Alert) -> bool:
    """Append `alert` unless one with this token was appended before, by any process: the token is a
    file `<run>/watch/<token>.once` made with O_EXCL, so two processes concluding at once write one."""
    folder = Path(run_dir) / "watch"
    try:
        folder.mkdir(exist_ok=True)
        os.close(os.open(folder / f"{token}.once", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    append_alert(run_dir, alert)
    return True


def read_alerts(run_dir: Path, offset: int = 0) -> list[Alert]:
    """Alerts of a run (from a byte offset); lines that are not alerts are skipped."""
    return AlertReader(run_dir, offset=offset).read_new()


class AlertReader:
    """New alerts since the last call (the TUI and `workbench watch` poll this). A line that is not an
    alert of its types (alert_of) is skipped and counted: `damaged`, the first reason in `damaged_why`."""

    def __init__(self, run_dir: Path, from_end: bool = False, offset: int = 0):
        path = alerts_path(run_dir)
        start = path.stat().st_size if from_end and path.exists() else offset
        self._tail = Tail(path, start)
        self.damaged = 0
        self.damaged_why: str | None = None

    def read_new(self, upto: int | None = None) -> list[Alert]:
        """The alerts since the last call; with `upto`, only those whose lines end by that byte offset."""
        alerts = []
        for raw in self._tail.read_all_lines(end=upto):
            found = alert_of(raw)
            if isinstance(found, dict):
                alerts.append(Alert.from_json(found))
            elif isinstance(found, str):
                self.damaged += 1
                self.damaged_why = self.damaged_why or found
        return alerts
