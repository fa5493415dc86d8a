"""swift_data oracle: every documented format read by swift's own loader and template, compared with
counts written by hand and with swift's encoding computed in the test itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.data.swift_view import DataRequest, ask_report, ask_row, cached_report, steps_per_epoch
from tests.data_inspect.formats import Format


def _by_name(formats: list[Format], report: dict[str, Any]) -> list[tuple[Format, dict[str, Any]]]:
    assert len(report["datasets"]) == len(formats)
    return list(zip(formats, report["datasets"], strict=True))


def test_every_format_keeps_the_rows_written_by_hand(formats: list[Format], formats_report: dict) -> None:
    for fmt, data in _by_name(formats, formats_report):
        if fmt.unreadable:
            assert data["status"] == "unreadable", fmt.name
            assert [bad["line"] for bad in data["bad_lines"]] == list(fmt.bad_lines), fmt.name
            assert "swift cannot load it" in data["error"]
            continue
        assert data["status"] == "ok", (fmt.name, data)
        assert data["rows"] == fmt.rows, fmt.name
        assert data["encode_errors"] == fmt.encode_errors, (fmt.name, data["encode_error_rows"])
        assert data["train_rows"] == fmt.rows - fmt.encode_errors, fmt.name
        assert {d["line"]: d["reason"] for d in data["dropped_rows"]}.keys() == fmt.dropped.keys(), fmt.name
        for bad in data["dropped_rows"]:
            assert fmt.dropped[bad["line"]] in bad["reason"], (fmt.name, bad)
        assert tuple(data["zero_trained_row_numbers"]) == fmt.zero_trained, fmt.name


def test_token_counts_are_swifts_own(formats: list[Format], formats_report: dict, swift_reference: dict) -> None:
    for fmt, data in _by_name(formats, formats_report):
        reference = swift_reference[fmt.name]
        if reference is None:
            assert data["status"] == "unreadable", fmt.name
            continue
        encoded = [row for row in reference if row is not None]
        assert len(reference) == data["rows"], fmt.name
        assert data["tokens"] == sum(n for n, _ in encoded), fmt.name
        assert data["trained_tokens"] == sum(t for _, t in encoded), fmt.name
        if encoded:
            assert data["token_lengths"]["max"] == max(n for n, _ in encoded), fmt.name
            assert data["trained_token_fraction"] == pytest.approx(data["trained_tokens"] / data["tokens"], abs=1e-4)


def test_a_system_prompt_and_tools_are_counted(formats: list[Format], formats_report: dict) -> None:
    """The old preview lost sharegpt's system prompt and ignored `tools`: swift encodes both."""
    data = {fmt.name: d for fmt, d in _by_name(formats, formats_report)}
    with_system = data["sharegpt (classic: conversations from/value)"]
    # row 1 carries a 10-word system prompt, row 2 gets the template's default one: row 1 is longer
    assert with_system["token_lengths"]["max"] > with_system["token_lengths"]["min"] + 5
    agent = data["agent (tools + tool_call/tool_response)"]["token_lengths"]["max"]
    messages_only = data["Anthropic tool_use/tool_result"]["token_lengths"]["max"]
    assert agent > messages_only + 100  # the tool schema goes into the prompt


def test_second_look_is_cached(formats_request: DataRequest, formats_report: dict) -> None:
    assert cached_report(formats_request) == formats_report


def test_a_hub_id_is_said_not_inspected(tiny_model: Path) -> None:
    request = DataRequest(refs=["AI-ModelScope/alpaca-gpt4-data-en#500"], model=str(tiny_model),
                          model_type="qwen2", template="qwen")
    report = ask_report(request)  # no dataset is loaded: the child answers fast
    assert report["datasets"][0]["status"] == "hub"
    assert report["datasets"][0]["note"].startswith("hub dataset: not inspected offline")
    assert report["steps_per_epoch"] is None


def test_rows_over_max_length_and_what_swift_does_with_them(format_dir: Path, tiny_model: Path,
                                                            swift_reference: dict) -> None:
    lengths = [n for n, _ in swift_reference["messages"]]  # 3 rows
    cut = sorted(lengths)[1]  # the longest row is over it, the others are not
    over = [number for number, n in enumerate(lengths, start=1) if n > cut]
    base = dict(refs=[str(format_dir / "messages.jsonl")], model=str(tiny_model), model_type="qwen2",
                template="qwen", max_length=cut, batch_size=1, grad_accum=1)
    deleted = ask_report(DataRequest(**base))["datasets"][0]  # swift's default: delete
    assert deleted["truncation_strategy"] == "delete"
    assert deleted["truncated_row_numbers"] == over and len(over) == 1
    assert deleted["tokens_lost"] == max(lengths)
    assert deleted["train_rows"] == 2
    right = ask_report(DataRequest(**base, truncation_strategy="right"))
    kept = right["datasets"][0]
    assert kept["tokens_lost"] == max(lengths) - cut
    assert kept["train_rows"] == 3 and right["steps_per_epoch"] == 3
    tiny = ask_report(DataRequest(**{**base, "max_length": 12}, truncation_strategy="right"))["datasets"][0]
    assert tiny["zero_trained_row_numbers"] == [1, 2, 3]  # every answer is cut off: nothing is trained
    assert tiny["trained_token_fraction"] == 0.0


def test_steps_per_epoch_by_hand() -> None:
    assert steps_per_epoch(10, batch_size=2, grad_accum=2, world_size=1) == 3  # 5 batches, 2+2+1
    assert steps_per_epoch(10, batch_size=2, grad_accum=1, world_size=2) == 3  # 5 batches over 2 ranks
    assert steps_per_epoch(50, batch_size=4, grad_accum=4, world_size=2) == 2  # 13 -> 7 per rank -> 2
    assert steps_per_epoch(0, batch_size=1, grad_accum=1, world_size=1) == 0
    assert steps_per_epoch(1, batch_size=8, grad_accum=16, world_size=8) == 1


def test_one_row_rendered_with_trained_tokens(formats_request: DataRequest, swift_reference: dict,
                                              formats: list[Format]) -> None:
    index = next(i for i, f in enumerate(formats) if f.name == "messages")
    answer = ask_row(formats_request, 1, dataset=index)
    text = "".join(s["text"] for s in answer["segments"])
    trained = "".join(s["text"] for s in answer["segments"] if s["trained"])
    assert text.startswith("<|im_start|>system\nYou answer in one short sentence.<|im_end|>")
    # only the assistant's answers (and their end-of-turn) are trained
    assert "Blue on a clear day." in trained and "Dark, with stars." in trained
    assert "What colour" not in trained and "system" not in trained
    assert "<|im_end|>" in trained  # the EOS that teaches the model to stop
    assert (answer["tokens"], answer["trained_tokens"]) == swift_reference["messages"][0]
    assert any(s["special"] and s["text"] == "<|im_start|>" for s in answer["segments"])
    loss_false = ask_row(formats_request, 1, dataset=next(i for i, f in enumerate(formats)
                                                          if f.name == "assistant turn with loss false"))
    assert "Hello." not in "".join(s["text"] for s in loss_false["segments"] if s["trained"])
    dropped = ask_row(formats_request, 2, dataset=next(i for i, f in enumerate(formats)
                                                       if f.name == "malformed rows"))
    assert "swift drops this row" in dropped["error"] and "wizard" in dropped["error"]


def test_each_question_of_one_warm_child_names_its_own_dropped_rows(tmp_path: Path, tiny_model: Path) -> None:
    """The app asks its data questions of one warm child (this module too): the second file's dropped rows are
    its own, not an empty list left from the first question."""
    good = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    bad = '{"foo": "no messages"}\n'
    (tmp_path / "a.jsonl").write_text(good + bad + good)
    (tmp_path / "b.jsonl").write_text(bad + good + bad)
    dropped = {}
    for name in ("a", "b"):
        request = DataRequest(refs=[str(tmp_path / f"{name}.jsonl")], model=str(tiny_model), model_type="qwen2",
                              template="qwen")
        data = ask_report(request)["datasets"][0]
        dropped[name] = ([row["line"] for row in data["dropped_rows"]], data["train_rows"])
    assert dropped == {"a": ([2], 2), "b": ([1, 3], 1)}
