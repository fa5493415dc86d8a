"""Run a named question in a child Python and cache its answer.

Protocol (child -> parent, on the child's original stdout, one JSON object a line):
`{"progress": "..."}` any number of times, then `{"answer": {...}}` or
`{"error": {"type": ..., "message": ..., "traceback": ...}}`. Whatever the libraries print
goes to the child's stderr, whose tail is kept for error messages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from backend.oracle.cache import OracleCache, cache_key, file_fingerprint, library_versions
from backend.paths import PACKAGE_DIR, REPO_DIR

Progress = Callable[[str], None]
DEFAULT_TIMEOUT = 600.0
STDERR_TAIL = 4000


class OracleError(RuntimeError):
    """The child could not answer (crash, timeout, exception): `detail` holds the evidence."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class OracleCancelled(OracleError):
    """The caller stopped waiting (`cancelled()` became true): the child was killed, nothing cached."""


class _CancelWatch:
    """Polls `cancelled` while a child runs and kills the child's process group once it is true."""

    POLL_S = 0.1

    def __init__(self, process: subprocess.Popen[str], cancelled: Callable[[], bool]) -> None:
        self.fired = False
        self._done = threading.Event()
        self._process, self._cancelled = process, cancelled
        threading.Thread(target=self._watch, daemon=True, name="oracle-cancel-watch").start()

    def _watch(self) -> None:
        while not self._done.wait(self.POLL_S):
            if self._cancelled():
                self.fired = True
                _kill_group(self._process)
                return

    def stop(self) -> None:
        self._done.set()


def _question_exists(question: str) -> bool:
    return question.isidentifier() and (PACKAGE_DIR / "oracle" / f"{question}.py").is_file()


def _key_for(question: str, payload: dict[str, Any], libraries: Iterable[str],
             inputs: Iterable[Path]) -> tuple[str, dict[str, str]]:
    versions = library_versions(libraries)
    fingerprints = {str(path): file_fingerprint(path) for path in inputs if Path(path).exists()}
    return cache_key(question, payload, versions, fingerprints), versions


def cached(question: str, payload: dict[str, Any], *, libraries: Iterable[str] = (),
           inputs: Iterable[Path] = (), cache: OracleCache | None = None) -> dict[str, Any] | None:
    """The cached answer, or None: never starts a child (safe on the UI thread for small inputs)."""
    key, _ = _key_for(question, payload, libraries, inputs)
    return (cache or OracleCache.default()).get(question, key)


def ask(question: str, payload: dict[str, Any], *, libraries: Iterable[str] = (),
        inputs: Iterable[Path] = (), timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
        refresh: bool = False, cache: OracleCache | None = None, env: dict[str, str] | None = None,
        cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The answer to `question` for `payload`: from the cache, else from a child process.

    `libraries` are the distributions whose versions key the cache; `inputs` are files or folders
    whose content keys it. Raises OracleError when the child fails; failures are not cached.
    `cancelled` (polled while the child runs, e.g. a worker's `is_cancelled`): once true, the child
    is killed and OracleCancelled raised, so an answer nobody waits for stops costing CPU.
    """
    if not _question_exists(question):
        raise OracleError(f"unknown oracle question {question!r}")
    cache = cache or OracleCache.default()
    libraries = tuple(libraries)
    key, versions = _key_for(question, payload, libraries, inputs)
    if not refresh and (hit := cache.get(question, key)) is not None:
        return hit
    if progress:
        progress(f"asking {', '.join(f'{n} {v}' for n, v in versions.items()) or 'the libraries'} "
                 f"({question}; first time for this input, cached afterwards)")
    answer = run_child(question, payload, timeout=timeout, progress=progress, env=env, cancelled=cancelled)
    cache.put(question, key, answer, {"question": question, "versions": versions, "payload": payload})
    return answer


def run_child(question: str, payload: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT,
              progress: Progress | None = None, env: dict[str, str] | None = None,
              cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Start the child, stream its progress, return its answer (no cache)."""
    if cancelled is not None and cancelled():
        raise OracleCancelled(f"oracle {question!r} cancelled before it started")
    child_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "backend.oracle.child", question],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=str(REPO_DIR), env=child_env, start_new_session=True, text=True, encoding="utf-8",
        errors="replace",
    )
    stderr_tail: list[str] = []
    reader = threading.Thread(target=_keep_tail, args=(process.stderr, stderr_tail), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, _kill_group, args=(process,))
    timer.start()
    watch = _CancelWatch(process, cancelled) if cancelled is not None else None
    result: dict[str, Any] | None = None
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(payload, default=str))
        process.stdin.close()
        for line in process.stdout:
            message = _parse(line)
            if message is None:
                continue
            if "progress" in message and progress:
                progress(str(message["progress"]))
            elif "answer" in message or "error" in message:
                result = message
        process.wait()
    finally:
        timer.cancel()
        if watch is not None:
            watch.stop()
        if process.poll() is None:
            _kill_group(process)
            process.wait()
    reader.join(timeout=5)
    tail = "".join(stderr_tail)[-STDERR_TAIL:]
    if watch is not None and watch.fired:
        raise OracleCancelled(f"oracle {question!r} cancelled: its child was stopped", tail)
    if result is None:
        why = f"timed out after {timeout:.0f} s" if process.returncode in (-signal.SIGKILL,) else (
            f"exited with code {process.returncode} before answering")
        raise OracleError(f"oracle {question!r} {why}", tail)
    if "error" in result:
        error = result["error"]
        raise OracleError(f"{error.get('type', 'Error')}: {error.get('message', '')}",
                          f"{error.get('traceback', '')}\n{tail}".strip())
    return result["answer"]


def _parse(line: str) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _keep_tail(stream: Any, tail: list[str]) -> None:
    for line in stream:
        tail.append(line)
        if len(tail) > 200:
            del tail[:100]


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
