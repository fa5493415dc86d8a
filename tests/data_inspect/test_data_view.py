"""The trained-token view and report texts, from hand-made answers (no child process)."""

from __future__ import annotations

from backend.data.view import report_text, row_text


def _seg(text: str, trained: bool = False, special: bool = False, lost: bool = False, tokens: int = 1) -> dict:
    return {"text": text, "trained": trained, "special": special, "lost": lost, "tokens": tokens}


ROW = {"ref": "chat.jsonl", "row": 2, "line": 5, "template": "qwen", "tokens": 10, "trained_tokens": 4,
       "max_length": 8, "truncation_strategy": "right", "over_max_length": True, "deleted": False, "kept": [0, 8],
       "segments": [_seg("<|im_start|>", special=True), _seg("user\nhi", tokens=3), _seg("<|im_end|>", special=True),
                    _seg("\n"), _seg("<|im_start|>", special=True), _seg("assistant\n"),
                    _seg("yo", trained=True, lost=True), _seg("<|im_end|>", trained=True, special=True, lost=True)]}


def test_plain_view_marks_trained_tokens_and_the_cut() -> None:
    plain = row_text(ROW, markers=True).plain
    lines = plain.splitlines()
    assert lines[0] == "row 2 of chat.jsonl, line 5 · template qwen · 10 tokens, 4 trained (40.0 %) · max_length 8"
    assert lines[1].startswith("legend: ⟦…⟧ trained")
    assert lines[2:] == ["<|im_start|>user", "hi<|im_end|>", "<|im_start|>assistant",
                         "✂ max_length 8: swift cuts here (truncation_strategy right); 2 tokens after it are "
                         "not trained", "⟦yo<|im_end|>⟧"]


def test_rich_view_styles_trained_context_and_special_tokens() -> None:
    text = row_text(ROW)
    styles = {text.plain[span.start:span.end]: str(span.style) for span in text.spans}
    assert "⟦" not in text.plain  # colour instead of markers in a terminal
    assert styles["user\nhi"] == "dim"
    assert styles["<|im_start|>"] == "magenta"
    assert styles["yo"] == "dim red strike"  # cut off: not trained after all


def test_deleted_row_and_errors() -> None:
    deleted = {**ROW, "truncation_strategy": "delete", "deleted": True}
    assert "swift deletes it (truncation_strategy delete): nothing of it is trained" in row_text(deleted).plain
    dropped = {"ref": "x.jsonl", "row": 3, "error": "swift drops this row: AssertionError: message: ..."}
    assert row_text(dropped).plain == "row 3 of x.jsonl: swift drops this row: AssertionError: message: ..."


def test_report_text_lists_drops_truncation_and_steps() -> None:
    report = {"datasets": [
        {"ref": "a.jsonl", "status": "ok", "rows_in_file": 10, "rows": 9, "dropped": 1,
         "dropped_rows": [{"row": 4, "line": 4, "reason": "AssertionError: message: {'role': 'wizard'}"}],
         "token_lengths": {"p50": 40, "p90": 90, "p99": 120, "max": 130}, "trained_tokens": 100, "tokens": 400,
         "truncated_rows": 2, "truncated_row_numbers": [3, 7], "tokens_lost": 75, "max_length": 100,
         "truncation_strategy": "delete", "zero_trained_rows": 0, "encoded": 9, "sample_limit": 20000},
        {"ref": "org/hub-set", "status": "hub", "note": "hub dataset: not inspected offline (swift downloads it "
                                                        "at launch)"}],
        "steps_per_epoch": 4, "train_rows": 7,
        "batch": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2, "world_size": 1}}
    assert report_text(report).plain.splitlines() == [
        "a.jsonl",
        "  swift keeps 9 of 10 rows; drops 1",
        "    ✗ line 4: AssertionError: message: {'role': 'wizard'}",
        "  tokens per row: p50 40 · p90 90 · p99 120 · max 130",
        "  trained tokens: 100 of 400 (25.0 %)",
        "  ⚠ 2 rows over max_length 100 (deleted by swift, truncation_strategy delete); 75 tokens lost; rows 3, 7",
        "org/hub-set",
        "  hub dataset: not inspected offline (swift downloads it at launch)",
        "steps per epoch: 4  (7 rows, batch 1 × accumulation 2 × 1 processes)",
    ]


def test_report_text_says_which_model_field_swift_needs_and_its_choices() -> None:
    """swift cannot infer model_type: the report (data, not a failure) says what to set and to what."""
    report = {"datasets": [
        {"ref": "a.jsonl", "status": "ok", "rows_in_file": 3, "rows": 3, "dropped": 0, "train_rows": 3, "encoded": 0,
         "note": "rows are loaded, not encoded: swift needs model.model_type"}],
        "steps_per_epoch": 3, "train_rows": 3, "template_note": "rows are loaded, not encoded: swift needs "
                                                                 "model.model_type",
        "model_choice": {"field": "model.model_type", "message": "swift cannot infer model_type: "
                                                                  "Qwen2ForCausalLM matches 2 types",
                         "choices": ["qwen2", "qwen2_gte"], "fix": "Set model.model_type to one of: qwen2, qwen2_gte."},
        "batch": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "world_size": 1}}
    assert report_text(report).plain.splitlines() == [
        "⚠ swift cannot infer model_type: Qwen2ForCausalLM matches 2 types: rows are loaded, not encoded.",
        "  Set model.model_type to one of: qwen2, qwen2_gte.",
        "a.jsonl",
        "  swift keeps 3 of 3 rows",
        "  rows are loaded, not encoded: swift needs model.model_type",
        "steps per epoch: 3  (3 rows, batch 1 × accumulation 1 × 1 processes)",
    ]
