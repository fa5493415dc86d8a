"""Golden prompts (`[eval] prompts = "FILE"`, #24): the file read row by row and checked before a launch.

A prompts file is JSON lines, one `{"messages": [{"role": ..., "content": ...}, ...]}` a line (the form
the workbench trains on); the last message may be the assistant's, which is then the reference answer
(batch_infer.split_row splits it off where the answers are made). Rows are read through the one record
reader (backend/data/records.py); every bad row is named by its line number with what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backend.data.files import file_problem
from backend.data.records import RowError, iter_records
from backend.launch.validate.core import Problem
from backend.models.refs import local_path
from backend.profile import LaunchProfile

ROLES = ("system", "user", "assistant", "tool")
FIX = ('Write one {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": '
       '"the reference answer (optional)"}]} a line.')


class PromptsError(ValueError):
    """The prompts file cannot be used; the message names the file, the line and what to do."""


def prompts_path(profile: LaunchProfile, base_dir: Path | None) -> Path | None:
    """The profile's prompts file (relative to the profile's folder, as dataset paths are); None when unset."""
    ref = profile.eval.prompts
    if not ref:
        return None
    found = local_path(ref, base_dir)
    if not found.exists() and not found.is_absolute() and base_dir is not None:
        found = base_dir / found  # missing: named where the profile's folder says it should be
    return found.absolute()


def read_prompts(path: Path) -> list[list[dict[str, Any]]]:
    """The conversations of a prompts file, each a list of messages; PromptsError on the first bad row."""
    if path.suffix.lower() != ".jsonl":
        raise PromptsError(f"{path}: golden prompts are a .jsonl file (one messages row a line)")
    rows: list[list[dict[str, Any]]] = []
    try:
        for number, record in iter_records(path):
            rows.append(_messages(path, number, record))
    except OSError as err:
        raise PromptsError(f"{path}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
    if not rows:
        raise PromptsError(f"{path}: has no prompts (the file is empty)")
    return rows


def _messages(path: Path, number: int, record: Any) -> list[dict[str, Any]]:
    where = f"{path} line {number}"
    if isinstance(record, RowError):
        raise PromptsError(f"{where}: {record}")
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise PromptsError(f"{where}: has no \"messages\" list")
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in ROLES and isinstance(message.get("content"), str)):
            raise PromptsError(f"{where}: message {i + 1} is not {{\"role\": one of {', '.join(ROLES)}, "
                               "\"content\": text}")
    asked = messages[:-1] if messages[-1]["role"] == "assistant" else messages
    if not any(m["role"] == "user" for m in asked):
        raise PromptsError(f"{where}: has no user message to answer (before the reference answer)")
    return messages


def golden_prompts(profile: LaunchProfile, base_dir: Path | None) -> Iterator[Problem]:
    """[eval] prompts: the file exists and every row is a conversation to answer."""
    path = prompts_path(profile, base_dir)
    if path is None:
        return
    if not path.is_file():
        there = path.exists() or path.is_symlink()
        why = (f"{path} is a folder" if path.is_dir() else file_problem(path)) if there else None
        yield Problem("eval.prompts", "error", f"golden prompts file {profile.eval.prompts!r}: {why}." if why else
                      f"golden prompts file {profile.eval.prompts!r} does not exist (looked for {path}).",
                      "Give an existing .jsonl file (relative to the profile's folder), or remove eval.prompts.")
        return
    try:
        read_prompts(path)
    except PromptsError as err:
        yield Problem("eval.prompts", "error", f"{err}.", FIX)
