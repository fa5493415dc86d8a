"""The chat protocol's side of the parent: the events a chat worker's lines become (Status, Ready, Chunk,
Done, Failed, WorkerDied), the typed reading of a message's fields, the generation settings a request
carries, and model output made printable. The client that speaks it is backend/chat/client.py; the worker
is backend/chat/worker.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GenerationSettings:
    """How answers are sampled; `system=None` keeps the model template's default system prompt."""

    system: str | None = None
    temperature: float = 0.7
    top_p: float = 0.9
    max_new_tokens: int = 256

    def problems(self) -> list[str]:
        found = []
        if not 0.0 <= self.temperature <= 2.0:
            found.append(f"temperature: {self.temperature} is outside 0-2 (0 = greedy, always the likeliest token)")
        if not 0.0 < self.top_p <= 1.0:
            found.append(f"top_p: {self.top_p} must be above 0 and at most 1 (1 = no nucleus cut-off)")
        if self.max_new_tokens < 1:
            found.append(f"max_new_tokens: {self.max_new_tokens} must be at least 1")
        return found


_CONTROL_PICTURES = {code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"} | {0x7F: 0x2421}


def printable(text: str) -> str:
    """Model output made safe for a terminal: control characters (a random or broken model emits
    them, ESC included) become their visible symbols; newlines and tabs stay."""
    return text.translate(_CONTROL_PICTURES)


# ---------------------------------------------------------------- events


@dataclass
class Status:
    message: str


@dataclass
class Ready:
    seconds: float  # from start() to ready, as the user waits it
    import_seconds: float
    load_seconds: float


@dataclass
class Chunk:
    request_id: str
    text: str


@dataclass
class Done:
    request_id: str
    text: str
    finish_reason: str  # stop | length | stopped
    tokens: int
    first_token_seconds: float | None
    seconds: float


@dataclass
class Failed:
    """One request failed; the worker goes on."""

    request_id: str | None
    message: str


@dataclass
class WorkerDied:
    message: str
    exit_code: int | None


ChatEvent = Status | Ready | Chunk | Done | Failed | WorkerDied


class ChatWorkerError(RuntimeError):
    pass


_MISSING = object()


def field_of(message: dict[str, Any], key: str, kind: type[Any], default: Any = _MISSING) -> Any:
    """`message[key]` if it is of `kind` (an int counts as a float; None where the default is None);
    KeyError when it is missing without a default, TypeError when it is of another type."""
    value: Any = message.get(key, default)
    if value is _MISSING:
        raise KeyError(f"the message has no {key!r}")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
        raise TypeError(f"{key!r} is {type(value).__name__}, not {kind.__name__}")
    return float(value) if kind is float else value
