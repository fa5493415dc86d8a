"""Question `library_names`: the names swift and transformers accept where their parsers take any string.

swift's argument schema has no choices for `--report_to` or `--target_modules`, so validate asks the
libraries themselves (child side, `answer`):
- trackers: transformers' `INTEGRATION_TO_CALLBACK` keys, plus the values `TrainingArguments.__post_init__`
  compares `report_to` with ("all", "none");
- target keywords: the `all-...` values swift's `get_target_modules` expands (all-linear, all-embedding).

Parent side: `known_names` (cached like every library answer: by the libraries' versions and this code).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import msgspec

from backend.oracle.cache import register_shape

QUESTION = "library_names"
LIBRARIES = ("ms-swift", "transformers")


class LibraryNames(msgspec.Struct, frozen=True):
    trackers: tuple[str, ...]
    target_keywords: tuple[str, ...]


register_shape(QUESTION, lambda answer: msgspec.convert(answer, LibraryNames))


def known_names(*, ask: bool = False) -> LibraryNames | None:
    """The cached answer; with `ask`, asked once (a child, about 10 s) when not cached. None when unknown."""
    from backend.oracle import OracleError, cached
    from backend.oracle import ask as ask_oracle

    found = cached(QUESTION, {}, libraries=LIBRARIES)
    if found is None and ask:
        try:
            found = ask_oracle(QUESTION, {}, libraries=LIBRARIES, timeout=300)
        except OracleError:  # the library checks then stay silent; swift's own parser still runs at launch
            return None
    return msgspec.convert(found, LibraryNames) if found is not None else None


# ---------------------------------------------------------------- child side


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("reading transformers' trackers")
    from transformers import TrainingArguments
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    trackers = set(INTEGRATION_TO_CALLBACK) | _compared_with(TrainingArguments.__post_init__, "report_to")
    progress("reading swift's target_modules keywords")
    from swift.pipelines.train.tuner import get_target_modules

    keywords = {text for text in _strings(get_target_modules) if text.startswith("all-")}
    return {"trackers": sorted(trackers), "target_keywords": sorted(keywords)}


def _tree(func: Callable[..., Any]) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(func)))


def _strings(func: Callable[..., Any]) -> set[str]:
    return {node.value for node in ast.walk(_tree(func)) if isinstance(node, ast.Constant)
            and isinstance(node.value, str)}


def _compared_with(func: Callable[..., Any], attribute: str) -> set[str]:
    """The string constants `self.<attribute>` is compared with (`== "all"`, `== ["none"]`)."""
    found: set[str] = set()
    for node in ast.walk(_tree(func)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == attribute:
            for other in node.comparators:
                found.update(item.value for item in ast.walk(other)
                             if isinstance(item, ast.Constant) and isinstance(item.value, str))
    return found
