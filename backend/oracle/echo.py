"""A trivial question for the service's own tests: echoes its payload, or misbehaves on request."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    print("noise a library might print")  # must not break the protocol
    progress("halfway")
    if payload.get("stderr"):  # more than a pipe holds (64 KiB): the parent must read it meanwhile
        sys.stderr.write("x" * int(payload["stderr"]) + "\nlast words\n")
        sys.stderr.flush()
    if payload.get("grandchild"):  # a process of the child's group, as a library's worker would be
        helper = subprocess.Popen(["sleep", "600"])
        progress(f"grandchild {helper.pid}")
    if payload.get("hang"):  # for the kill and cancel tests: say who we are, then never answer
        progress(f"pid {os.getpid()}")
        threading.Event().wait()
    if payload.get("fail"):
        raise ValueError(f"asked to fail: {payload['fail']}")
    if payload.get("collector"):  # the child answers with the collector paused (backend/core/collector.py)
        return {"collecting": gc.isenabled()}
    if payload.get("env"):  # what the child sees of one variable (which changes restart a warm child)
        return {"value": os.environ.get(str(payload["env"])), "pid": os.getpid()}
    if payload.get("who"):
        return {"echo": payload, "pid": os.getpid()}
    return {"echo": payload}
