"""The chat client given a worker that breaks the protocol: a stdout line that is JSON but not a
message (not an object, a field missing or of the wrong type) is reported, never a reader thread
that dies and leaves the pane "loading" for ever. No model is loaded: the worker is a stand-in."""

from __future__ import annotations

import sys

import pytest

from backend.chat.client import ChatClient
from backend.chat.protocol import WorkerDied
from backend.checkpoints.targets import ModelTarget
from tests.jobs.jobs_helpers import wait_gone
from tests.timing import scaled


def stand_in(line: str) -> list[str]:
    """A worker that says `line` on stdout, then waits for its stdin to close (as the real one does)."""
    script = f"import sys; print({line!r}, flush=True); sys.stdin.read()"
    return [sys.executable, "-c", script]


@pytest.mark.parametrize("line, shown", [
    ("[1,2]", "[1,2]"),
    ('"loading"', '"loading"'),
    ('{"type": "chunk", "text": "Hel"}', '{"type": "chunk", "text": "Hel"}'),  # no id
    ('{"type": "ready", "import_seconds": "fast"}', '"fast"'),  # a number that is text
], ids=["list", "string", "field-missing", "wrong-type"])
def test_a_line_that_is_not_a_message_is_reported_and_the_worker_killed(
        line: str, shown: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChatClient, "worker_argv", lambda self: stand_in(line))
    client = ChatClient(ModelTarget("stand-in", label="stand-in"))
    client.start()
    pid = client.pid
    try:
        event = client.next_event(timeout=scaled(10))
        assert isinstance(event, WorkerDied), f"no report within 10 s, got {event!r} (state {client.state})"
        assert "not a message of the chat protocol" in event.message and shown in event.message
        assert client.state == "dead"
        assert wait_gone([pid]) == []
    finally:
        client.close(timeout=1)
