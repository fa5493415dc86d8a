"""The chat worker as a real subprocess on the tiny model: streaming, stop, crash and restart, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.chat.client import ChatClient
from backend.chat.protocol import ChatWorkerError, Chunk, Done, GenerationSettings, WorkerDied
from backend.chat.worker import RequestError, check_generate
from backend.checkpoints.targets import ModelTarget, target_of_run
from backend.rundir.layout import RunFolder
from tests.jobs.jobs_helpers import wait_gone
from tests.timing import scaled

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
WHO = [{"role": "user", "content": "who are you?"}]


@pytest.fixture(scope="module")
def tuned(quill_run: RunFolder) -> ModelTarget:
    return target_of_run(quill_run.path)


@pytest.fixture(scope="module")
def client(tuned: ModelTarget) -> Iterator[ChatClient]:
    """The fine-tuned model's worker, loaded once for the module (the base answers long, random text)."""
    chat = ChatClient(tuned, name="tuned")
    chat.start()
    ready = chat.wait_ready()
    print(f"model load: {ready.seconds:.1f} s (swift import {ready.import_seconds:.1f} s, "
          f"model {ready.load_seconds:.1f} s)")
    yield chat
    chat.close()


@pytest.fixture(scope="module")
def base_client(tuned: ModelTarget) -> Iterator[ChatClient]:
    base = tuned.base()
    assert base is not None and base.adapters == ()
    chat = ChatClient(base, name="base")
    chat.start()
    chat.wait_ready()
    yield chat
    chat.close()


def _timed(chat: ChatClient, settings: GenerationSettings) -> list[tuple[float, Chunk | Done]]:
    return [(time.monotonic(), event) for event in chat.ask(WHO, settings)]


def test_answer_streams_in_chunks_the_first_before_the_answer_is_complete(client: ChatClient) -> None:
    events = _timed(client, GenerationSettings(temperature=0.0, max_new_tokens=64))
    chunks = [(t, e) for t, e in events if isinstance(e, Chunk)]
    done_at, done = events[-1]
    assert isinstance(done, Done) and done.finish_reason in ("stop", "length")
    assert len(chunks) >= 2, f"one piece only: {done.text!r}"
    assert done.first_token_seconds is not None and done.first_token_seconds < done.seconds
    assert "".join(e.text for _, e in chunks) == done.text
    print(f"first token {done.first_token_seconds:.3f} s, {done.tokens} tokens in {done.seconds:.3f} s")


def test_a_long_answer_shows_its_first_chunk_before_half_its_time(base_client: ChatClient) -> None:
    """The base model's greedy ramble runs to max_new_tokens (a long answer): streamed, its first piece
    arrives long before the end; an answer passed on only once complete would show it at the end."""
    started = time.monotonic()
    events = _timed(base_client, GenerationSettings(temperature=0.0, max_new_tokens=400))
    first_chunk_at = next(t for t, e in events if isinstance(e, Chunk))
    done_at, done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "length" and done.tokens == 400
    total = done_at - started
    assert first_chunk_at - started < total / 2, f"first chunk at {first_chunk_at - started:.2f} s of {total:.2f} s"


def test_stop_ends_the_answer_mid_way_and_the_worker_goes_on(base_client: ChatClient) -> None:
    # the random-init base model rambles until max_new_tokens: plenty of time to stop it
    settings = GenerationSettings(temperature=1.0, top_p=1.0, max_new_tokens=1000)
    stopped: Done | None = None
    chunks = 0
    for event in base_client.ask(WHO, settings):
        if isinstance(event, Chunk):
            chunks += 1
            if chunks == 1:
                base_client.stop()
        else:
            stopped = event
    assert stopped is not None and stopped.finish_reason == "stopped"
    assert stopped.tokens < 1000
    assert base_client.state == "ready"
    again = list(base_client.ask(WHO, GenerationSettings(temperature=0.0, max_new_tokens=8)))
    assert isinstance(again[-1], Done) and again[-1].finish_reason == "length" and again[-1].tokens == 8


def test_killed_worker_is_reported_and_a_restart_works(tuned: ModelTarget) -> None:
    chat = ChatClient(tuned, name="victim")
    pids = []
    try:
        chat.start()
        chat.wait_ready()
        pids.append(chat.pid)
        os.kill(chat.pid, signal.SIGKILL)
        died = next(chat.events(timeout=30))
        assert isinstance(died, WorkerDied) and "killed by SIGKILL" in died.message and "Restart" in died.message
        assert chat.state == "dead"
        with pytest.raises(ChatWorkerError, match="killed by SIGKILL"):
            chat.generate(WHO)
        chat.restart()
        pids.append(chat.pid)
        chat.wait_ready()
        answer = list(chat.ask(WHO, GenerationSettings(temperature=0.0)))
        assert isinstance(answer[-1], Done) and answer[-1].text
    finally:
        chat.close()
    assert pids[0] != pids[1] and wait_gone(pids) == []


def test_worker_that_cannot_load_says_why(tmp_path: Path) -> None:
    chat = ChatClient(ModelTarget(model=str(tmp_path / "no-such-model"), model_type="qwen2", template="qwen"))
    chat.start()
    with pytest.raises(ChatWorkerError, match="could not load"):
        chat.wait_ready(timeout=scaled(120))
    chat.close()


def test_bad_requests_name_the_field() -> None:
    with pytest.raises(RequestError, match="temperature"):
        check_generate({"messages": WHO, "temperature": 7})
    with pytest.raises(RequestError, match=r"messages\[0\]"):
        check_generate({"messages": [{"role": "robot", "content": "x"}]})
    with pytest.raises(RequestError, match="last message"):
        check_generate({"messages": [*WHO, {"role": "assistant", "content": "hi"}]})
    assert GenerationSettings(top_p=0).problems() == [
        "top_p: 0 must be above 0 and at most 1 (1 = no nucleus cut-off)"]


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_worker_outlives_its_client(tuned: ModelTarget, how: str) -> None:
    """A client process that exits (atexit) or is SIGKILLed leaves no worker behind."""
    script = textwrap.dedent(f"""
        import sys, time
        from backend.chat.client import ChatClient
        from backend.checkpoints.targets import ModelTarget
        chat = ChatClient(ModelTarget.from_dict({tuned.to_dict()!r}))
        chat.start()
        chat.wait_ready()
        print(chat.pid, flush=True)
        if {how!r} == "sigkill":
            time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
    worker_pid = int(owner.stdout.readline())
    if how == "sigkill":
        owner.kill()
    owner.wait(timeout=scaled(60))
    assert wait_gone([worker_pid], timeout=15) == [], f"chat worker {worker_pid} outlived its client"
