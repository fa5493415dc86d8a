"""The child side of an oracle question: `python -m backend.oracle.child QUESTION` (payload on stdin)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any, TextIO


def _protocol_stream() -> TextIO:
    """Keep the real stdout for the protocol; send everything else printed (libraries) to stderr."""
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def main(argv: list[str]) -> int:
    protocol = _protocol_stream()

    def send(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message, default=str) + "\n")
        protocol.flush()

    try:
        question = argv[0]
        module = importlib.import_module(f"backend.oracle.{question}")
        payload = json.loads(sys.stdin.read() or "{}")
        answer = module.answer(payload, lambda text: send({"progress": str(text)}))
        send({"answer": answer})
        return 0
    except BaseException as exc:  # errors are data: the parent decides what to show
        send({"error": {"type": type(exc).__name__, "message": str(exc)[:2000],
                        "traceback": traceback.format_exc()[-4000:]}})
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
