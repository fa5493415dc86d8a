"""The child side of the service (backend/oracle/service.py): `python -m backend.oracle.child PARENT_PID`.

It dies with its parent: `PR_SET_PDEATHSIG` (Linux) as its first act, then a check that the parent
is still the one that started it (it may have died before the call); and stdin is a lifeline read by
a thread of its own: when it closes, the child ends (its whole process group if a question is still
running). Questions arrive as JSON lines on stdin and are answered one at a time on the original
stdout; whatever else is printed (the libraries) goes to stderr.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import queue
import signal
import sys
import threading
import traceback
from typing import Any, BinaryIO, TextIO

from backend.core.collector import paused_while_loading

PR_SET_PDEATHSIG = 1
# The workbench's own folders are read by our code when it is called (backend/core/paths.py, backend/watch/config.py),
# never by a library as it is imported: each question carries their values, so a change never restarts a warm child.
PER_QUESTION_ENV = ("WORKBENCH_DATA_DIR", "WORKBENCH_WORKSPACE", "WORKBENCH_CONFIG_DIR")


def die_with_parent(parent: int | None) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the lifeline alone ends the child
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent is gone already (we were adopted)


def _protocol_streams() -> tuple[BinaryIO, TextIO]:
    """(the lifeline: the real stdin; the protocol: the real stdout). Both fds then point elsewhere
    (stdin at /dev/null, stdout at stderr), so a library cannot read our input or break our output."""
    lifeline = os.fdopen(os.dup(0), "rb")
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return lifeline, protocol


def _end_now() -> None:
    """The parent is gone while a question runs: end this child's whole group (ours: we lead it)."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _read_lifeline(lifeline: BinaryIO, requests: queue.Queue[dict[str, Any] | None], busy: threading.Event,
                   gone: threading.Event) -> None:
    for line in lifeline:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict):
            requests.put(request)
    gone.set()
    if busy.is_set():
        _end_now()
    requests.put(None)


def _take_env(values: object) -> None:
    """The asker's values of PER_QUESTION_ENV (None: unset); any other name is ignored."""
    for name, value in (values.items() if isinstance(values, dict) else ()):
        if name not in PER_QUESTION_ENV:
            continue
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


def _answer(request: dict[str, Any], send: Any) -> None:
    ident = request.get("id")
    try:
        _take_env(request.get("env"))
        from backend.oracle.cache import question_module

        module_name = question_module(str(request.get("question")))
        if module_name is None:
            raise ValueError(f"unknown oracle question {request.get('question')!r}")
        with paused_while_loading():  # a question loads the libraries it asks (backend/core/collector.py)
            module = importlib.import_module(module_name)
            answer = module.answer(request.get("payload") or {},
                                   lambda text: send({"id": ident, "progress": str(text)}))
        send({"id": ident, "answer": answer})
    except BaseException as exc:  # errors are data: the parent decides what to show
        send({"id": ident, "error": {"type": type(exc).__name__, "message": str(exc)[:2000],
                                     "traceback": traceback.format_exc()[-4000:]}})


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]) if argv and argv[0].isdigit() else None)
    lifeline, protocol = _protocol_streams()
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            protocol.write(json.dumps(message, default=str) + "\n")
            protocol.flush()

    requests: queue.Queue[dict[str, Any] | None] = queue.Queue()
    busy, gone = threading.Event(), threading.Event()
    threading.Thread(target=_read_lifeline, args=(lifeline, requests, busy, gone), daemon=True).start()
    while (request := requests.get()) is not None:
        busy.set()
        if gone.is_set():  # the lifeline closed as this question arrived: nobody waits for it
            break
        _answer(request, send)
        busy.clear()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (seconds with torch loaded): nothing is left to flush
