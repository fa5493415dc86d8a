"""A trivial question for the runner's own tests: echoes its payload, or fails on request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    print("noise a library might print")  # must not break the protocol
    progress("halfway")
    if payload.get("fail"):
        raise ValueError(f"asked to fail: {payload['fail']}")
    return {"echo": payload}
