"""The oracle runner: child process, protocol, errors as data, cache keyed by input content."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.oracle import OracleCache, OracleError, ask, cached

pytestmark = pytest.mark.one_shot_oracle  # the subject is the oracle's own children (tests/warm_oracle.py)


def test_answer_comes_from_the_child_and_then_from_the_cache(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path / "cache")
    seen: list[str] = []
    first = ask("echo", {"x": 1}, cache=cache, progress=seen.append)
    assert first == {"echo": {"x": 1}}
    assert "halfway" in seen  # the child's progress line reached the parent
    assert any("first time" in line for line in seen)  # the first use announces itself
    assert cached("echo", {"x": 1}, cache=cache) == {"echo": {"x": 1}}
    seen.clear()
    assert ask("echo", {"x": 1}, cache=cache, progress=seen.append) == {"echo": {"x": 1}}
    assert seen == []  # no child the second time


def test_input_content_keys_the_cache(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path / "cache")
    data = tmp_path / "rows.jsonl"
    data.write_text("one\n")
    ask("echo", {"file": str(data)}, inputs=[data], cache=cache)
    assert cached("echo", {"file": str(data)}, inputs=[data], cache=cache) is not None
    data.write_text("two\n")
    assert cached("echo", {"file": str(data)}, inputs=[data], cache=cache) is None


def test_an_exception_in_the_child_is_an_error_with_its_message_and_is_not_cached(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path / "cache")
    with pytest.raises(OracleError, match="ValueError: asked to fail: yes") as info:
        ask("echo", {"fail": "yes"}, cache=cache)
    assert "Traceback" in info.value.detail
    assert cached("echo", {"fail": "yes"}, cache=cache) is None


def test_unknown_question_is_refused_without_a_child(tmp_path: Path) -> None:
    with pytest.raises(OracleError, match="unknown oracle question"):
        ask("../../etc", {}, cache=OracleCache(tmp_path))


def test_a_damaged_cache_file_is_asked_again(tmp_path: Path) -> None:
    cache = OracleCache(tmp_path / "cache")
    ask("echo", {"y": 2}, cache=cache)
    for file in (tmp_path / "cache" / "echo").glob("*.json"):
        file.write_text("{not json")
    assert cached("echo", {"y": 2}, cache=cache) is None
    assert ask("echo", {"y": 2}, cache=cache) == {"echo": {"y": 2}}
