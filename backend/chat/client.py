"""The chat client: starts a chat worker, streams its answers, stops them, never leaves it behind.

The worker (`python -m backend.chat.worker`) runs in its own session and process group
and talks only through its stdin/stdout pipes: nothing else on this machine, or off it, can
reach it. A reader thread turns its lines into events (Status, Ready, Chunk, Done, Failed,
WorkerDied). Give `on_event` to receive them on that thread (the TUI posts them as
messages); without it they queue up for `events()` / `ask()` (the CLI).

The worker is killed (its whole process group) by `close()`, when the client is garbage
collected, at interpreter exit, and it ends by itself when its stdin closes, so even a
client killed with SIGKILL leaves no worker behind. `close()` waits a bounded time.

A stdout line that is JSON but not a message of the protocol (not an object, a field missing or
of the wrong type) means the worker cannot be trusted any more: it is killed and WorkerDied says
what it sent, so the user never waits on a reader that is gone.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from backend.chat.protocol import (
    ChatEvent,
    ChatWorkerError,
    Chunk,
    Done,
    Failed,
    GenerationSettings,
    Ready,
    Status,
    WorkerDied,
    field_of,
    printable,
)
from backend.checkpoints.targets import ModelTarget
from backend.core.own_children import end_session, signal_session
from backend.core.paths import REPO_DIR

WORKER_MARKER_ENV = "WORKBENCH_CHAT_WORKER"


# ---------------------------------------------------------------- the client

_LIVE: weakref.WeakSet[ChatClient] = weakref.WeakSet()


@atexit.register
def close_all() -> None:
    """Kill every chat worker this process started (also called at interpreter exit)."""
    for client in list(_LIVE):
        client.close()


class ChatClient:
    """One chat worker process and the conversation plumbing around it."""

    def __init__(self, target: ModelTarget, on_event: Callable[[ChatEvent], None] | None = None,
                 name: str = "chat"):
        self.target = target
        self.name = name
        self._on_event = on_event
        self._events: queue.Queue[ChatEvent] = queue.Queue()
        self._process: subprocess.Popen[str] | None = None
        self._stderr: deque[str] = deque(maxlen=40)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False  # the owner is done with this client: no new worker may start
        self._fatal: str | None = None
        self._started_at = 0.0
        self.ready: Ready | None = None
        self.current_id: str | None = None
        self.dead: WorkerDied | None = None

    # -- life cycle

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "backend.chat.worker", *self.target.worker_args()]

    def start(self) -> None:
        """Start the worker and return at once; Ready (or WorkerDied) follows as an event."""
        with self._lock:
            if self._closed:
                raise ChatWorkerError(f"{self.name}: this chat was closed")
            if self._process is not None and self._process.poll() is None:
                raise ChatWorkerError(f"{self.name}: the worker is already running")
            self._fatal, self.ready, self.dead, self.current_id = None, None, None, None
            self._stderr.clear()
            self._started_at = time.monotonic()
            env = {**os.environ, WORKER_MARKER_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1",
                   "TOKENIZERS_PARALLELISM": "false"}
            self._process = subprocess.Popen(
                self.worker_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, encoding="utf-8", errors="replace", bufsize=1, cwd=str(REPO_DIR), env=env,
                start_new_session=True, close_fds=True,
            )
            _LIVE.add(self)
            process = self._process
        threading.Thread(target=self._read_stdout, args=(process,), daemon=True, name=f"{self.name}-out").start()
        threading.Thread(target=self._read_stderr, args=(process,), daemon=True, name=f"{self.name}-err").start()

    def restart(self) -> None:
        """Kill the worker (dead or alive) and start a fresh one; the caller keeps the conversation."""
        self._kill()
        self.start()

    def close(self, timeout: float = 3.0) -> None:
        """Kill the worker for good (a later start() is refused). Safe to call twice, from any thread."""
        with self._lock:
            self._closed = True
        self._kill(timeout)

    def _kill(self, timeout: float = 3.0) -> None:
        """Kill the worker's process group and reap it, in at most about 2 x `timeout` seconds (a
        process the kernel cannot take yet is left to a reaper thread). Once it is no longer
        `self._process`, its reader thread drops whatever it still says, its end included."""
        with self._lock:
            process, self._process = self._process, None
        _LIVE.discard(self)
        if process is None:
            return
        try:
            process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        end_session(process, timeout, name=self.name)

    def __del__(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None:
            signal_session(process, signal.SIGKILL)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def state(self) -> str:
        """closed | dead | loading | busy | ready"""
        if self.dead is not None:
            return "dead"
        if self._process is None:
            return "closed"
        if self.ready is None:
            return "loading"
        return "busy" if self.current_id else "ready"

    # -- talking

    def generate(self, messages: list[dict[str, str]], settings: GenerationSettings | None = None) -> str:
        """Ask for an answer to the conversation `messages` (last one the user's); returns its id.

        Allowed while the model is loading: the worker answers once it is ready."""
        settings = settings or GenerationSettings()
        problems = settings.problems()
        if problems:
            raise ValueError("; ".join(problems))
        with self._lock:
            if self.dead is not None:
                raise ChatWorkerError(f"{self.name}: {self.dead.message}")
            if self._process is None:
                raise ChatWorkerError(f"{self.name}: the worker is not running; start or restart it")
            if self.current_id is not None:
                raise ChatWorkerError(f"{self.name}: still answering {self.current_id}; stop it first")
            request_id = f"{self.name}-{next(self._ids)}"
            self.current_id = request_id
            self._send({"type": "generate", "id": request_id, "messages": messages, "system": settings.system,
                        "temperature": settings.temperature, "top_p": settings.top_p,
                        "max_new_tokens": settings.max_new_tokens})
        return request_id

    def stop(self) -> None:
        """Stop the answer being generated (a Done with finish_reason 'stopped' follows)."""
        with self._lock:
            if self.current_id is not None and self._process is not None:
                self._send({"type": "stop", "id": self.current_id})

    def _send(self, request: dict[str, Any]) -> None:
        try:
            self._process.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            self._process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError):
            pass  # the worker is gone; the reader thread reports how

    # -- queue mode (no on_event): the CLI

    def next_event(self, timeout: float | None = None) -> ChatEvent | None:
        """The next event, or None after `timeout` seconds without one."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def events(self, timeout: float | None = None) -> Iterator[ChatEvent]:
        """Events as they come; stops after `timeout` seconds without one."""
        while (event := self.next_event(timeout)) is not None:
            yield event

    def wait_ready(self, timeout: float = 300.0) -> Ready:
        for event in self.events(timeout):
            if isinstance(event, Ready):
                return event
            if isinstance(event, WorkerDied):
                raise ChatWorkerError(event.message)
        raise ChatWorkerError(f"{self.name}: the model did not load within {timeout:.0f} s")

    def ask(self, messages: list[dict[str, str]], settings: GenerationSettings | None = None,
            timeout: float = 600.0) -> Iterator[Chunk | Done]:
        """Generate and yield the answer's chunks, then its Done; ChatWorkerError if it fails."""
        request_id = self.generate(messages, settings)
        for event in self.events(timeout):
            if isinstance(event, WorkerDied):
                raise ChatWorkerError(event.message)
            if isinstance(event, Failed) and event.request_id in (request_id, None):
                raise ChatWorkerError(event.message)
            if isinstance(event, Chunk | Done) and event.request_id == request_id:
                yield event
                if isinstance(event, Done):
                    return
        raise ChatWorkerError(f"{self.name}: no answer within {timeout:.0f} s")

    # -- reader threads

    def _read_stdout(self, process: subprocess.Popen[str]) -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            try:
                message = json.loads(line)
            except ValueError:
                self._stderr.append(line)
                continue
            if process is not self._process:
                continue  # a worker being killed: what it still says belongs to no one
            try:
                event = self._event_of(message)
            except (AttributeError, KeyError, TypeError, ValueError):
                self._protocol_broken(process, line)
                continue
            if event is not None:
                self._dispatch(event)
        code = process.wait()
        if process is self._process:  # not killed on purpose
            self.dead = WorkerDied(self._death_message(code), code)
            self.current_id = None
            self._dispatch(self.dead)

    def _read_stderr(self, process: subprocess.Popen[str]) -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            if line.strip():
                self._stderr.append(line.rstrip())

    def _protocol_broken(self, process: subprocess.Popen[str], line: str) -> None:
        """The worker said something that is not a message: it is killed, and its end (read next by
        this thread) is reported with what it sent."""
        shown = line.strip()
        self._fatal = self._fatal or (f"it sent a line that is not a message of the chat protocol: "
                                      f"{printable(shown[:200])}{'...' if len(shown) > 200 else ''}")
        signal_session(process, signal.SIGKILL)

    def _event_of(self, message: dict[str, Any]) -> ChatEvent | None:
        """The event a protocol message is; KeyError/TypeError/AttributeError when it is not one."""
        if not isinstance(message, dict):
            raise TypeError(f"a message is a JSON object, not {type(message).__name__}")
        kind = message.get("type")
        if kind == "status":
            return Status(field_of(message, "message", str, ""))
        if kind == "ready":
            self.ready = Ready(time.monotonic() - self._started_at, field_of(message, "import_seconds", float, 0.0),
                               field_of(message, "load_seconds", float, 0.0))
            return self.ready
        if kind == "chunk":
            return Chunk(field_of(message, "id", str), field_of(message, "text", str))
        if kind == "done":
            done = Done(field_of(message, "id", str), field_of(message, "text", str), field_of(message, "finish_reason", str),
                        field_of(message, "tokens", int, 0), field_of(message, "first_token_seconds", float, None),
                        field_of(message, "seconds", float, 0.0))
            if done.request_id == self.current_id:
                self.current_id = None
            return done
        if kind == "error":
            if message.get("fatal"):
                self._fatal = field_of(message, "message", str, "unknown error")
                return None  # the worker exits next; WorkerDied carries this message
            failed = Failed(field_of(message, "id", str, None), field_of(message, "message", str, "unknown error"))
            if failed.request_id == self.current_id:
                self.current_id = None
            return failed
        return None

    def _death_message(self, code: int) -> str:
        if self._fatal:
            return f"the model worker for {self.target.label or self.target.model} failed: {self._fatal}"
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        tail = " | ".join(list(self._stderr)[-3:])
        return (f"the model worker for {self.target.label or self.target.model} {how}"
                + (f"; its last output: {tail[-400:]}" if tail else "") + ". Restart it to go on.")

    def _dispatch(self, event: ChatEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)
        else:
            self._events.put(event)
