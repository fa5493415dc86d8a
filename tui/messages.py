"""App-wide messages (a widget's own messages are nested classes of that widget)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message


@dataclass
class RunLaunched(Message):
    """A run was started detached; `run_dir` is its folder."""

    run_dir: Path


@dataclass
class ChatRequested(Message):
    """Open the chat with `target` (a run folder, a checkpoint or model folder, a ModelTarget, or a lookup that
    finds one, run in the chat's worker): the app handles it, so a screen asks without importing the app."""

    target: object
    compare: bool = False
