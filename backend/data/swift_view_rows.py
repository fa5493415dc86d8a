"""The data oracle's rows (child side): length statistics, a row's trained-token segments, and the
file line each row of swift's dataset starts on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from backend.data.swift_view import LISTED


def length_stats(ordered: list[int]) -> dict[str, float]:
    return {"p50": percentile(ordered, 50), "p90": percentile(ordered, 90), "p99": percentile(ordered, 99),
            "max": ordered[-1] if ordered else 0, "min": ordered[0] if ordered else 0,
            "mean": round(sum(ordered) / len(ordered), 1) if ordered else 0}


def percentile(ordered: list[int], q: float) -> int:
    """Nearest-rank percentile of sorted values."""
    if not ordered:
        return 0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def segments(tokenizer: Any, ids: list[int], labels: list[int], max_length: int | None,
              truncation_strategy: str | None) -> dict[str, Any]:
    """Runs of tokens that share (trained, special, lost) decoded as one piece of text each."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(token, "special", False):
            special.add(int(token_id))
    length = len(ids)
    strategy = truncation_strategy or "delete"
    kept = (0, length)
    if max_length is not None and length > max_length:
        kept = (length - max_length, length) if strategy == "left" else (0, max_length)
    parts: list[dict[str, Any]] = []
    run: list[int] = []
    state: tuple[bool, bool, bool] | None = None

    def flush() -> None:
        if run and state is not None:
            text = tokenizer.decode(run, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            parts.append({"text": text, "trained": state[0], "special": state[1], "lost": state[2],
                             "tokens": len(run)})

    for position, (token_id, label) in enumerate(zip(ids, labels, strict=False)):
        lost = not kept[0] <= position < kept[1]
        current = (label != -100, token_id in special, lost)
        if current != state or current[1]:
            flush()
            run, state = [], current
        run.append(token_id)
    flush()
    trained = sum(1 for x in labels if x != -100)
    return {"segments": parts, "tokens": length, "trained_tokens": trained,
            "max_length": max_length, "truncation_strategy": strategy,
            "over_max_length": length > (max_length or length),
            "deleted": strategy == "delete" and kept != (0, length), "kept": list(kept)}


def short_reason(reason: str) -> str:
    return reason.split(":")[0] if len(reason) > 80 else reason


def kept_indices(raw_rows: int, drops: list[tuple[int, str]], kept: int) -> list[int] | None:
    """Raw (file-order) index of each row swift kept, when each raw row gave at most one row."""
    dropped = {i for i, _ in drops}
    indices = [i for i in range(raw_rows) if i not in dropped]
    return indices if len(indices) == kept else None


def line_of(lines: list[int] | None, index: int) -> int | None:
    return lines[index] if lines is not None and 0 <= index < len(lines) else None


def line_map(ref: str) -> list[int] | None:
    """The line each raw row starts on, in the order swift reads a single file (None when unknown:
    folders, `#N` samples)."""
    path_part, _, sample = ref.partition("#")
    path = Path(path_part)
    if sample or not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix == ".txt":
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [number for number, _ in enumerate(handle, start=1)]
    from backend.data.records import iter_records

    try:
        return [line for line, _ in iter_records(path)]
    except Exception:
        return None


def bad_lines(path_part: str) -> list[dict[str, Any]]:
    """Where a file swift cannot load is broken (lines that are not JSON), found by reading it."""
    from backend.data.records import RowError, iter_records

    path = Path(path_part)
    if not path.is_file():
        return []
    bad = []
    try:
        for line, record in iter_records(path):
            if isinstance(record, RowError):
                bad.append({"line": line, "reason": str(record)})
                if len(bad) >= LISTED:
                    break
    except Exception:
        return bad
    return bad
