"""A launch where no row trains a token is an error, not a warning (#29 Medium 11): the run would 'finish'
with loss 0.0 from its first step. The report is swift's dataset report as the data oracle returns it."""

from __future__ import annotations

from backend.data.swift_view import data_problems


def _dataset(ref: str, encoded: int, zero: int) -> dict:
    return {"ref": ref, "kind": "file", "status": "ok", "rows_in_file": encoded, "rows": encoded,
            "encoded": encoded, "train_rows": encoded, "zero_trained_rows": zero,
            "zero_trained_row_numbers": list(range(1, zero + 1))}


def test_every_row_training_nothing_is_an_error() -> None:
    problems = data_problems("data.train", {"datasets": [_dataset("./a.jsonl", 3, 3), _dataset("./b.jsonl", 2, 2)]})
    errors = [message for _, level, message, _ in problems if level == "error"]
    assert errors == ["no row swift encoded trains a single token (5 of 5): the run would learn nothing "
                      "(loss 0.0 from the first step)."]


def test_some_rows_training_nothing_stay_a_warning() -> None:
    problems = data_problems("data.train", {"datasets": [_dataset("./a.jsonl", 3, 3), _dataset("./b.jsonl", 2, 0)]})
    assert [level for _, level, _, _ in problems] == ["warning"]
