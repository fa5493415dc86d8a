"""A trivial question for the runner's own tests: echoes its payload, or fails on request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    print("noise a library might print")  # must not break the protocol
    progress("halfway")
    if payload.get("hang"):  # for the cancel test: say who we are, then never answer
        import os
        import threading

        progress(f"pid {os.getpid()}")
        threading.Event().wait()
    if payload.get("fail"):
        raise ValueError(f"asked to fail: {payload['fail']}")
    return {"echo": payload}
