"""The one child-process service: every one-shot child (oracle questions, swift's registry, the
tiny-model build) and the app's warm child are a `Child` here.

A child is `python -m backend.oracle.child PARENT_PID` in its own process group (a new session). It
dies with the process that asked: it sets `PR_SET_PDEATHSIG` as its first act (then checks that its
parent is still the one that started it), and its stdin is a lifeline: when stdin closes it exits.
Protocol (JSON lines): parent -> child `{"id", "question", "payload"}`; child -> parent, on its
original stdout, `{"id", "progress"}` any number of times, then `{"id", "answer"}` or
`{"id", "error": {"type", "message", "traceback"}}`. Whatever the libraries print goes to the
child's stderr, read at the same time as stdout (a bounded tail is kept for error messages).

A question that takes too long, or whose caller cancels, kills the child's whole process group; a
child that dies otherwise is said as it happened (a signal from outside, the OOM killer, an exit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from backend.core.own_children import signal_session
from backend.core.paths import REPO_DIR
from backend.oracle.child import PER_QUESTION_ENV
from backend.oracle.errors import OracleCancelled, OracleError

Progress = Callable[[str], object]  # its answer is not used
Cancelled = Callable[[], bool]
STDERR_TAIL = 8000  # bytes of the child's stderr kept for error messages
WATCH_POLL_S = 0.1
CLOSE_WAIT_S = 5.0


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(extra or {})}


def started_alike(env: dict[str, str], other: dict[str, str]) -> bool:
    """Whether children started with these environments answer alike: they may differ in PER_QUESTION_ENV only."""
    return {k: v for k, v in env.items() if k not in PER_QUESTION_ENV} == \
        {k: v for k, v in other.items() if k not in PER_QUESTION_ENV}


class Child:
    """One child Python that answers questions, one at a time, over JSON lines."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = child_env(env)
        self._extra = env  # asked again at each question: the PER_QUESTION_ENV values of that moment
        self.codes: dict[str, str] = {}  # question -> code digest it was first asked with (warm use)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "backend.oracle.child", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(REPO_DIR),
            env=self.env, start_new_session=True,
        )
        self._stderr = bytearray()
        self._stderr_lock = threading.Lock()
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True, name="oracle-stderr")
        self._stderr_reader.start()
        self._asked = 0
        self._killed_because: str | None = None  # set by us before we kill: timeout or cancel

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def ask(self, question: str, payload: dict[str, Any], *, timeout: float,
            progress: Progress | None = None, cancelled: Cancelled | None = None) -> dict[str, Any]:
        """Send one question and wait for its answer. Raises OracleError with the real cause."""
        self._asked += 1
        ident = self._asked
        with self._stderr_lock:
            self._stderr.clear()
        watch = _Watch(self, timeout, cancelled)
        try:
            now = child_env(self._extra)
            self._send({"id": ident, "question": question, "payload": payload,
                        "env": {name: now.get(name) for name in PER_QUESTION_ENV}})
            result = self._read_answer(ident, progress)
        except BaseException:  # the caller failed (its progress callback, say): nobody waits for the answer
            self.kill("was stopped: its caller failed")
            raise
        finally:
            watch.stop()
        if result is None:
            try:
                self.process.wait(CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self.terminate("closed its output without answering (stopped)")
            self.kill()
            error = OracleCancelled if watch.cancelled else OracleError
            raise error(f"oracle {question!r} {self._death_cause()}", self.stderr_tail())
        if "error" in result:
            failure = result["error"] if isinstance(result["error"], dict) else {}
            raise OracleError(f"{failure.get('type', 'Error')}: {failure.get('message', '')}",
                              f"{failure.get('traceback', '')}\n{self.stderr_tail()}".strip())
        return result.get("answer") or {}

    def close(self) -> None:
        """Cut the lifeline (the child exits) and reap it; kill its group if it lingers."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close_pipes()

    def terminate(self, because: str | None = None) -> None:
        """SIGKILL the child's process group (its pid is the group's id), noting why: safe from any thread."""
        if because is not None and self._killed_because is None:
            self._killed_because = because
        signal_session(self.process, signal.SIGKILL)

    def kill(self, because: str | None = None) -> None:
        """`terminate`, then reap the child and close its pipes (the thread that asked only)."""
        self.terminate(because)
        self.process.wait()
        self._close_pipes()

    def stderr_tail(self) -> str:
        self._stderr_reader.join(timeout=0 if self.alive else 2)
        with self._stderr_lock:
            return bytes(self._stderr).decode("utf-8", "replace")

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(message, default=str) + "\n").encode())
            self.process.stdin.flush()
        except OSError:
            pass  # the child is gone: reading its stdout ends at once and says why

    def _read_answer(self, ident: int, progress: Progress | None) -> dict[str, Any] | None:
        """The answer or error message for `ident`; None when the child closed its stdout."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = _parse(line)
            if message is None or message.get("id") != ident:
                continue
            if "progress" in message:
                if progress is not None:
                    progress(str(message["progress"]))
            elif "answer" in message or "error" in message:
                return message
        return None

    def _read_stderr(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        with stream:
            while chunk := stream.read1(65536):  # type: ignore[attr-defined]
                with self._stderr_lock:
                    self._stderr += chunk
                    del self._stderr[:-STDERR_TAIL]

    def _close_pipes(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def _death_cause(self) -> str:
        """Why the child ended before answering: our reason if we killed it, else what the exit says."""
        if self._killed_because is not None:
            return self._killed_because
        return exit_cause(self.process.returncode, self.process.pid)


def exit_cause(returncode: int | None, pid: int) -> str:
    """How a child that did not answer ended, as far as its exit status proves it."""
    if returncode is None or returncode >= 0:
        return f"exited with code {returncode} before answering"
    number = -returncode
    if number == signal.SIGKILL:
        oom = "out of memory (the kernel's OOM killer)"
        return (f"was killed by SIGKILL from outside: {oom}" if _oom_killed(pid)
                else f"was killed by SIGKILL from outside (probably {oom})")
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return f"was killed by {name} (signal {number}) from outside"


def _oom_killed(pid: int) -> bool:
    """Whether the kernel log names `pid` as killed for memory (only when it can be read quickly)."""
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=2, errors="replace").stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return f"Killed process {pid} " in log or f",pid={pid}," in log


class _Watch:
    """Kills the child's group when the deadline passes or `cancelled()` becomes true."""

    def __init__(self, child: Child, timeout: float, cancelled: Cancelled | None) -> None:
        self.cancelled = False
        self._child, self._timeout, self._cancelled_fn = child, timeout, cancelled
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="oracle-watch").start()

    def _watch(self) -> None:
        deadline = time.monotonic() + self._timeout
        while not self._done.wait(WATCH_POLL_S):
            if self._cancelled_fn is not None and self._cancelled_fn():
                self.cancelled = True
                self._child.terminate("was cancelled: its child was stopped")
                return
            if time.monotonic() >= deadline:
                self._child.terminate(f"timed out after {self._timeout:.0f} s")
                return

    def stop(self) -> None:
        self._done.set()


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


class WarmChild:
    """The app's long-lived child: it keeps swift/transformers imported between questions.

    One question at a time (a caller waiting for it polls its `cancelled`). A question that fails by
    the child's death (cancel, timeout, kill) drops the child; the next question starts a new one. A
    question whose code changed since this child first ran it, or a changed environment (but for
    PER_QUESTION_ENV, which each question carries), also gets a new child (the old one has the old
    modules imported, and the libraries read their variables as they are imported).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: Child | None = None
        self._stopped = False
        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends: start it from a
        # thread that lives as long as this service, never from a short-lived worker
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="oracle-warm-spawner")

    def ask(self, question: str, payload: dict[str, Any], *, code: str, timeout: float,
            progress: Progress | None = None, cancelled: Cancelled | None = None) -> dict[str, Any]:
        while not self._lock.acquire(timeout=WATCH_POLL_S):
            if cancelled is not None and cancelled():
                raise OracleCancelled(f"oracle {question!r} was cancelled while waiting for the warm child")
        try:
            child = self._ready(question, code)
            try:
                return child.ask(question, payload, timeout=timeout, progress=progress, cancelled=cancelled)
            finally:
                if not child.alive:
                    self._child = None
        finally:
            self._lock.release()

    def stop(self) -> None:
        """Kill the child now (a question still running gets its error) and end the spawner."""
        self._stopped = True
        child = self._child
        if child is not None:
            child.terminate("was stopped: the app that asked is closing")
            if self._lock.acquire(blocking=False):  # idle: reap it here (else the asker does)
                try:
                    child.kill()
                finally:
                    self._lock.release()
        self._spawner.shutdown(wait=False)

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.process.pid if child is not None and child.alive else None

    def _ready(self, question: str, code: str) -> Child:
        if self._stopped:
            raise OracleError(f"oracle {question!r}: the warm child was stopped")
        child = self._child
        if child is not None and (not child.alive or not started_alike(child.env, child_env())
                                  or child.codes.setdefault(question, code) != code):
            child.close()
            child = None
        if child is None:
            child = self._child = self._spawner.submit(Child).result()
            child.codes[question] = code
        return child
