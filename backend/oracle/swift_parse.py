"""Question: how swift's own parser reads argument lists (child side).

`{"command": "sft", "argvs": [[...], ...]}` -> `{"results": [{"args": {...}, "unknown": [...],
"error": None}, ...]}`. The parser is the one `swift sft` builds (see `swift_args.build_parser`);
`parse_known_args` fills the namespace without running the dataclass's `__post_init__`, so no model
or dataset is loaded. Several argument lists go in one question: a child costs ~15 s of imports.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

from backend.oracle.swift_args import COMMANDS, _jsonable, build_parser


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    progress("importing ms-swift's argument classes")
    import swift.arguments as arguments

    parser = build_parser(getattr(arguments, COMMANDS[payload.get("command", "sft")]))
    return {"results": [_parse(parser, [str(word) for word in argv]) for argv in payload.get("argvs", [])]}


def _parse(parser: Any, argv: list[str]) -> dict[str, Any]:
    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages):
            namespace, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return {"args": None, "unknown": [], "error": messages.getvalue().strip().splitlines()[-1:] or ["error"]}
    return {"args": {k: _jsonable(v) for k, v in sorted(vars(namespace).items())}, "unknown": list(unknown),
            "error": None}
