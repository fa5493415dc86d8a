"""The shape of the `swift_data_child` answers the app reads (a report, or one row's view).

The cache checks a kept answer against these before handing it out (backend/oracle/cache.py
`register_shape`): an entry of another shape (a damaged or hand-edited cache file, an older
workbench's answer) is treated as absent and asked again, never indexed into by a caller that would
end in a traceback. Only what the app reads is typed; anything else the child adds passes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from backend.oracle.cache import register_shape

QUESTION = "backend.data.swift_view_child"  # the question's module, run in the oracle's child


class BadLine(msgspec.Struct):
    """A row or line named in a report (`bad_lines`, `dropped_rows`, `encode_error_rows`)."""

    line: int | None = None
    row: int | None = None
    reason: str = ""


class Segment(msgspec.Struct):
    text: str
    trained: bool = False
    special: bool = False
    lost: bool = False
    tokens: int = 0


class RowAnswer(msgspec.Struct):
    """One row's trained-token view, or why there is none (`error`)."""

    ref: str | None = None
    row: int | None = None
    error: str | None = None
    segments: list[Segment] = []
    tokens: int = 0
    kept: list[int] = []
    max_length: int | None = None
    truncation_strategy: str | None = None


class DatasetReport(msgspec.Struct):
    ref: str | None = None
    kind: str | None = None
    status: str | None = None
    error: str | None = None
    rows_in_file: int | None = None
    rows: int | None = None
    encoded: int | None = None
    train_rows: int | None = None
    dropped: int | None = None
    truncated_rows: int = 0
    tokens_lost: int = 0
    zero_trained_rows: int = 0
    encode_errors: int = 0
    max_length: int | None = None
    truncation_strategy: str | None = None
    truncated_row_numbers: list[int] = []
    zero_trained_row_numbers: list[int] = []
    bad_lines: list[BadLine] = []
    dropped_rows: list[BadLine] = []
    encode_error_rows: list[BadLine] = []
    views: list[RowAnswer] = []


class ModelChoice(msgspec.Struct):
    """What the user must set when swift cannot infer the model_type or the template."""

    field: str
    message: str = ""
    choices: list[str] = []
    fix: str = ""


class DataReport(msgspec.Struct):
    datasets: list[DatasetReport]
    train_rows: int = 0
    steps_per_epoch: int | None = None
    steps_estimated: bool = False
    truncated_rows: int = 0
    tokens_lost: int = 0
    trained_token_fraction: float = 0.0
    batch: dict[str, Any] = {}
    template_note: str | None = None
    model_choice: ModelChoice | None = None


def decode(answer: dict[str, Any]) -> DataReport | RowAnswer:
    """The typed answer: a report when it lists datasets, else one row's (raises when it fits neither)."""
    if "datasets" in answer:
        return msgspec.convert(answer, DataReport)
    return msgspec.convert(answer, RowAnswer)


register_shape(QUESTION, decode)
