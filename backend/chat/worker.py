"""The chat worker: one model in a long-lived process, spoken to in JSON lines over stdin/stdout.

    python -m backend.chat.worker --model M [--adapters A ...] [--model-type T]
                                       [--template T] [--torch-dtype D]

Requests, one JSON object a line on stdin:
    {"type": "generate", "id": "r1", "messages": [{"role": "user", "content": "hi"}],
     "system": null, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 256}
    {"type": "stop", "id": "r1"}        stop that answer (without an id: the current one)
Responses, one JSON object a line on stdout:
    {"type": "status", "message": "loading the model"}             while starting
    {"type": "ready", "model": "...", "import_seconds": 9.8, "load_seconds": 0.4}
    {"type": "chunk", "id": "r1", "text": "Hel"}
    {"type": "done", "id": "r1", "text": "Hello!", "finish_reason": "stop" | "length" | "stopped",
     "tokens": 3, "first_token_seconds": 0.1, "seconds": 0.3}
    {"type": "error", "id": "r1" | null, "message": "...", "fatal": false}

`system: null` keeps the template's default system prompt. The model runs with swift's
`TransformersEngine`. No port is opened; stdout carries only protocol lines (anything a
library prints goes to stderr). End of stdin ends the worker at once: it never outlives
its client.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from typing import Any, TextIO

from backend.core.collector import paused_while_loading

ROLES = ("system", "user", "assistant")


class Channel:
    """The protocol half of stdout: one JSON object a line, whole lines only."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        with self.lock:
            self.stream.write(json.dumps({"type": kind, **fields}) + "\n")
            self.stream.flush()


class RequestError(ValueError):
    pass


def check_generate(request: dict[str, Any]) -> dict[str, Any]:
    """A generate request with defaults filled in; RequestError names the bad field."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: a non-empty list of {role, content} is needed")
    for number, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(
                message.get("content"), str):
            raise RequestError(f"messages[{number}]: needs role (one of {', '.join(ROLES)}) and content (text)")
    if messages[-1]["role"] != "user":
        raise RequestError("messages: the last message must be the user's")
    checked = {"id": str(request.get("id", "")), "messages": messages, "system": request.get("system")}
    for name, default, low, high in (("temperature", 0.7, 0.0, 2.0), ("top_p", 0.9, 1e-6, 1.0)):
        value = request.get(name, default)
        if not isinstance(value, int | float) or not low <= value <= high:
            raise RequestError(f"{name}: must be a number from {low:g} to {high:g}, got {value!r}")
        checked[name] = float(value)
    tokens = request.get("max_new_tokens", 256)
    if not isinstance(tokens, int) or tokens < 1:
        raise RequestError(f"max_new_tokens: must be a whole number of at least 1, got {tokens!r}")
    checked["max_new_tokens"] = tokens
    return checked


class Worker:
    """Reads requests on a thread (so a stop arrives mid-answer) and answers them one at a time."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stopped: set[str] = set()
        self.current: str | None = None

    def read_requests(self, stream: TextIO) -> None:
        for line in stream:
            if line.strip():
                self.handle_line(line)
        os._exit(0)  # the client is gone (or closed us): end now, mid-answer or mid-load

    def handle_line(self, line: str) -> None:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as err:
            self.channel.send("error", id=None, message=f"request line is not a JSON object ({err}): {line[:200]!r}",
                              fatal=False)
            return
        kind = request.get("type")
        if kind == "stop":
            target = request.get("id") or self.current
            if target:
                self.stopped.add(str(target))
        elif kind == "generate":
            try:
                self.requests.put(check_generate(request))
            except RequestError as err:
                self.channel.send("error", id=request.get("id"), message=str(err), fatal=False)
        else:
            self.channel.send("error", id=request.get("id"), message=f"type: unknown request type {kind!r} "
                              "(use generate or stop)", fatal=False)

    def is_stopped(self) -> bool:
        return self.current is not None and self.current in self.stopped

    def serve(self, engine: Any) -> None:
        while True:
            request = self.requests.get()
            self.current = request["id"]
            try:
                answer(engine, request, self)
            except Exception as err:  # one failed answer must not end the conversation
                self.channel.send("error", id=request["id"], message=f"{type(err).__name__}: {err}", fatal=False)
            finally:
                self.stopped.discard(request["id"])
                self.current = None


def answer(engine: Any, request: dict[str, Any], worker: Worker) -> None:
    """Stream one answer as chunk lines, then a done line."""
    from swift.infer_engine import InferRequest, RequestConfig

    messages = list(request["messages"])
    if request["system"] is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": request["system"]})
    messages = fit_context(engine, messages, request["max_new_tokens"])
    config = RequestConfig(stream=True, max_tokens=request["max_new_tokens"],
                           temperature=request["temperature"], top_p=request["top_p"])
    started = time.monotonic()
    first: float | None = None
    parts: list[str] = []
    finish_reason, tokens = None, 0
    for response in engine.infer([InferRequest(messages=messages)], config)[0]:
        if response is None:
            continue
        choice = response.choices[0]
        finish_reason = choice.finish_reason or finish_reason
        tokens = response.usage.completion_tokens if response.usage else tokens
        text = choice.delta.content or ""
        if text and not worker.is_stopped():
            first = first if first is not None else time.monotonic() - started
            parts.append(text)
            worker.channel.send("chunk", id=request["id"], text=text)
    reason = "stopped" if worker.is_stopped() else (finish_reason or "stop")
    worker.channel.send("done", id=request["id"], text="".join(parts), finish_reason=reason, tokens=tokens,
                        first_token_seconds=first, seconds=time.monotonic() - started)


def fit_context(engine: Any, messages: list[dict[str, Any]], max_new_tokens: int) -> list[dict[str, Any]]:
    """The conversation without its oldest turns, as far as needed for the prompt to leave room for an
    answer in the model's context (the system prompt and the last message always stay).

    A chat that outgrows the context goes on, forgetting its beginning, rather than failing."""
    limit = getattr(engine, "max_model_len", None) or 8192
    room = max(1, min(max_new_tokens, limit // 4))  # a long max_new_tokens is shortened by swift itself
    kept = list(messages)
    while prompt_tokens(engine, kept) + room > limit:
        first = next((i for i, m in enumerate(kept[:-1]) if m["role"] != "system"), None)
        if first is None:
            break  # only the last message is left: swift says why it does not fit
        del kept[first]
        while first < len(kept) - 1 and kept[first]["role"] == "assistant":
            del kept[first]  # a turn goes with its answer
    return kept


def prompt_tokens(engine: Any, messages: list[dict[str, Any]]) -> int:
    """Tokens of the prompt the template builds (a prompt over the template's own limit counts as too long)."""
    from swift.infer_engine import InferRequest
    from swift.template import MaxLengthError

    try:
        return len(engine.template.encode(InferRequest(messages=messages))["input_ids"])
    except MaxLengthError:
        return 1 << 30


def load_engine(args: argparse.Namespace, worker: Worker) -> Any:
    from swift.infer_engine import TransformersEngine

    dtype = None
    if args.torch_dtype and args.torch_dtype != "auto":
        import torch

        dtype = getattr(torch, args.torch_dtype)
    worker.channel.send("status", message="loading the model")
    engine = TransformersEngine(args.model, adapters=args.adapters or None, model_type=args.model_type,
                                template_type=args.template, torch_dtype=dtype)
    install_stop(engine, worker.is_stopped)
    return engine


def install_stop(engine: Any, is_stopped: Any) -> None:
    """Make generation end at the next token once a stop is asked for.

    swift builds the stopping criteria inside `template.prepare_generate_kwargs`, so ours is
    added there; without it a stopped answer would go on generating in swift's thread."""
    import torch
    from transformers import StoppingCriteria

    class StopRequested(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), bool(is_stopped()), dtype=torch.bool, device=input_ids.device)

    template = engine.template
    prepare = template.prepare_generate_kwargs

    def prepare_with_stop(generate_kwargs: dict[str, Any], *, model: Any = None) -> dict[str, Any]:
        generate_kwargs = prepare(generate_kwargs, model=model)
        generate_kwargs["stopping_criteria"].append(StopRequested())
        return generate_kwargs

    template.prepare_generate_kwargs = prepare_with_stop


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="workbench chat worker (JSON lines on stdin/stdout)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapters", nargs="*", default=[])
    parser.add_argument("--model-type", default=None)
    parser.add_argument("--template", default=None)
    parser.add_argument("--torch-dtype", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    channel = Channel(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)  # whatever swift, transformers or tqdm print goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    worker = Worker(channel)
    threading.Thread(target=worker.read_requests, args=(sys.stdin,), daemon=True, name="requests").start()
    channel.send("status", message="importing swift")
    started = time.monotonic()
    try:
        with paused_while_loading():
            from swift.infer_engine import TransformersEngine  # noqa: F401  (swift imports lazily: the slow part)

            imported = time.monotonic()
            engine = load_engine(args, worker)
    except Exception as err:
        channel.send("error", id=None, message=f"could not load {args.model}: {type(err).__name__}: {err}",
                     fatal=True)
        os._exit(1)
    loaded = time.monotonic()
    channel.send("ready", model=args.model, adapters=args.adapters, import_seconds=imported - started,
                 load_seconds=loaded - imported)
    worker.serve(engine)


if __name__ == "__main__":
    main()
