"""The data oracle's hook in swift's loader (child side): which rows swift's preprocessor drops, and why.

swift (strict=False) drops a row it cannot convert without saying which; wrapping its own
`RowPreprocessor.batched_preprocess` names each one with the exception swift raised for it.
"""

from __future__ import annotations

from typing import Any


class Drops:
    """Rows swift's preprocessor drops, seen from inside swift's own loop (raw row index, reason)."""

    def __init__(self) -> None:
        self.seen = 0
        self.rows: list[tuple[int, str]] = []

    def reset(self) -> None:
        self.seen, self.rows = 0, []


def reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 240:
        text = text[:239] + "…"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def observe_preprocessor(drops: Drops) -> None:
    """Wrap swift's `RowPreprocessor.batched_preprocess` so each dropped row is recorded with the
    exception swift raised for it. A clean batch runs swift's code once, unchanged; a batch with a
    bad row is re-run row by row in strict mode to name it. The rows kept are exactly swift's."""
    from swift.dataset.preprocessor.core import RowPreprocessor

    original = RowPreprocessor.batched_preprocess
    if getattr(original, "_workbench_observed", False):
        original._workbench_drops = drops  # a warm child's next question records into its own Drops
        return

    def observed(self: Any, batched_row: dict[str, Any], *, strict: bool,
                 ignore_max_length_error: bool) -> dict[str, Any]:
        drops: Drops = observed._workbench_drops  # type: ignore[attr-defined]
        size = len(next(iter(batched_row.values()))) if batched_row else 0
        start = drops.seen
        drops.seen += size
        try:
            result = original(self, batched_row, strict=True, ignore_max_length_error=ignore_max_length_error)
            if batch_size(result) == size:
                return result
        except Exception:
            if strict:
                raise
        kept: list[dict[str, Any]] = []
        for i in range(size):
            one = {key: values[i:i + 1] for key, values in batched_row.items()}
            fields = ", ".join(k for k, v in one.items() if v and v[0] is not None)
            try:
                result = original(self, one, strict=True, ignore_max_length_error=ignore_max_length_error)
            except Exception as err:  # swift (strict=False) deletes this row
                drops.rows.append((start + i, f"{reason(err)} (row fields: {fields})"))
                continue
            if batch_size(result) == 0:
                drops.rows.append((start + i, f"swift's {type(self).__name__} keeps nothing of this row "
                                              f"(row fields: {fields or 'none'})"))
                continue
            kept += self.batched_to_rows(result)
        merged = self.rows_to_batched(kept)
        if not merged:
            merged["messages"] = []
        return merged

    observed._workbench_observed = True  # type: ignore[attr-defined]
    observed._workbench_drops = drops  # type: ignore[attr-defined]
    RowPreprocessor.batched_preprocess = observed


def root_reason(err: BaseException) -> str:
    """The first exception of a chain (datasets wraps the parser's error), and the wrapper's text."""
    root = err
    while (root.__cause__ or root.__context__) is not None and root is not (root.__cause__ or root.__context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    return reason(err) if root is err else f"{reason(root)} ({type(err).__name__})"


def batch_size(batched: dict[str, Any] | None) -> int:
    if not batched:
        return 0
    return max((len(v) for v in batched.values() if v is not None), default=0)
