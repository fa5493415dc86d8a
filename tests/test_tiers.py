"""The quick tier's rule (tests/tiers.py): what it leaves out, and a list that names only tests that exist."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.tiers import LAUNCH_WORKSPACE, LIBRARY_CHILD, SLOW_TESTS, slow_reason

REPO = Path(__file__).resolve().parents[1]


def _test_names(module: Path) -> list[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    ]


@pytest.mark.parametrize("entry", sorted(SLOW_TESTS))
def test_each_listed_slow_test_exists(entry: str) -> None:
    """A renamed or moved test must not leave a stale line behind (nor walk back into the quick tier)."""
    path, _, name = entry.partition("::")
    modules = [REPO / path] if path.endswith(".py") else sorted(REPO.glob(f"{path}*.py"))
    assert modules and all(module.is_file() for module in modules), f"{entry}: no such test module"
    if name:
        assert any(test.startswith(name) for test in _test_names(modules[0])), f"{entry}: no such test"


def test_trainings_library_children_and_listed_tests_are_slow() -> None:
    assert (
        slow_reason("tests/x/test_a.py::test_b", {"tmp_path", "quill_run"})
        == "trains (one of the session's shared real runs)"
    )
    assert slow_reason("tests/x/test_a.py::test_b", {"tiny_model"}) == LIBRARY_CHILD
    assert slow_reason("tests/tui/test_launch_form.py::test_tuner_to_qlora_and_back", set()) == LAUNCH_WORKSPACE
    assert (
        slow_reason(
            "tests/test_validate_offline.py::test_a_learning_rate_above_one_is_an_error_with_the_range", {"tmp_path"}
        )
        == LIBRARY_CHILD
    )


def test_a_pure_logic_test_stays_in_the_quick_tier() -> None:
    assert slow_reason("tests/test_units.py::test_sizes", {"tmp_path", "monkeypatch"}) is None
    assert slow_reason("tests/test_validate_offline.py::test_another_rule", {"tmp_path"}) is None
